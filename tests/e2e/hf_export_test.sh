#!/usr/bin/env bash
# `loom ckpt export --format hf`: a trained GPT of each style -- gpt2 (tied embedding, biases,
# LayerNorm, GELU) and llama (RoPE, RMSNorm, SwiGLU, grouped-query attention: 4 heads sharing 2
# key/value heads) -- written as a Hugging Face model directory, read back by an independent
# numpy implementation of GPT2LMHeadModel / LlamaForCausalLM (hf_reference.py, float64, from
# config.json and model.safetensors alone): the prompt's logits equal Loom's (`loom sample
# --logits`) within 1e-5 of the largest logit (f32 export; measured ~3e-7) and 2e-2 (bf16
# export: every weight rounded to 8 bits), and greedy continuations agree token for token.
# Where PyTorch and transformers are installed (bash scripts/bootstrap.sh compare), the same
# directories are loaded by transformers itself and checked the same way.
# Bad input: a DiT checkpoint, --part with --format hf.
# Usage: hf_export_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
prompt="And God said unto Moses"
hf_python=${LOOM_COMPARE_PYTHON:-$HOME/.cache/loom/venv-compare/bin/python}

for style in gpt2 llama; do
  extra=()
  [ $style = llama ] && extra=(--set model.heads=4 --set model.kv_heads=2)
  "$loom" train "$here/tiny_gpt.toml" --set run.out_dir="$work/$style" --set model.style=\"$style\" \
    --set model.context=64 --set train.steps=200 --set train.batch_size=8 --set optim.lr=3e-3 \
    --set eval.every=0 --set sample.tokens=0 "${extra[@]}" > "$work/$style.log" 2>&1 ||
    { fail "$style: training failed"; cat "$work/$style.log"; continue; }
  run=$work/$style/tiny_gpt
  "$loom" sample "$run" --prompt "$prompt" --tokens 24 --temperature 0 --logits "$work/$style.npy" \
    > "$work/$style.greedy" || fail "$style: loom sample --logits failed"
  for dtype in f32 bf16; do
    out=$work/$style-hf-$dtype
    "$loom" ckpt export "$run" "$out" --format hf --dtype $dtype > "$out.log" 2>&1 ||
      { fail "$style $dtype: export failed: $(cat "$out.log")"; continue; }
    bound=1e-5
    [ $dtype = bf16 ] && bound=2e-2
    echo -n "$style $dtype: "
    /usr/bin/python3 "$here/hf_reference.py" "$out" "$prompt" 24 "$work/$style.npy" $bound \
      > "$out.greedy" || fail "$style $dtype: logits differ from Loom's"
    echo
    if [ $dtype = f32 ]; then
      # loom sample ends its text with a newline
      [ "$(cat "$out.greedy")" = "$(head -c -1 "$work/$style.greedy")" ] ||
        fail "$style: greedy continuations differ: '$(cat "$out.greedy")' vs '$(cat "$work/$style.greedy")'"
      if "$hf_python" -c "import transformers, torch" 2> /dev/null; then
        "$hf_python" - "$out" "$prompt" "$work/$style.npy" <<'PY' || fail "$style: transformers disagrees"
import sys
import numpy as np
import torch
from transformers import AutoModelForCausalLM
d, prompt, npy = sys.argv[1:4]
m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
with torch.no_grad():
    z = m(torch.tensor([list(prompt.encode())])).logits[0].double().numpy()
err = np.abs(z - np.load(npy)).max() / np.abs(z).max()
print(f"transformers {type(m).__name__}: prompt logits within {err:.2e} of Loom's (bound 1e-5)")
sys.exit(0 if err < 1e-5 else 1)
PY
      else
        echo "(transformers not installed: bash scripts/bootstrap.sh compare adds it)"
      fi
    fi
  done
done

# Bad input: one clear error each.
"$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/dit" > "$work/dit.log" 2>&1 ||
  fail "dit training failed"
"$loom" ckpt export "$work/dit/tiny_dit" "$work/x" --format hf > "$work/bad.log" 2>&1 &&
  fail "a DiT checkpoint was exported as a Hugging Face GPT"
grep -q "is a checkpoint of a dit model, not a gpt" "$work/bad.log" || fail "no model-kind error: $(cat "$work/bad.log")"
"$loom" ckpt export "$work/gpt2/tiny_gpt" "$work/x" --format hf --part ema > "$work/bad.log" 2>&1 &&
  fail "--part with --format hf was accepted"
grep -q "format hf writes the model" "$work/bad.log" || fail "no --part error: $(cat "$work/bad.log")"

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo PASS
