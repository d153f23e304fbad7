#!/usr/bin/env bash
# `loom ckpt export --format hf`: a trained GPT of each style -- gpt2 (tied embedding, biases,
# LayerNorm, GELU) and llama (RoPE, RMSNorm, SwiGLU, grouped-query attention: 4 heads sharing 2
# key/value heads) -- written as a Hugging Face model directory, read back by an independent
# numpy implementation of GPT2LMHeadModel / LlamaForCausalLM (hf_reference.py, float64, from
# config.json and model.safetensors alone): the prompt's logits equal Loom's (`loom sample
# --logits`) within 1e-5 of the largest logit (f32 export; measured ~3e-7) and 2e-2 (bf16
# export: every weight rounded to 8 bits), and greedy continuations agree token for token.
# Back into Loom: a sharded export (--shard-mb: several files and an index) is the start of a
# new run (train.init_from), whose model gives the very same logits.
# transformers (PyTorch 2.x, both from the pinned Python environment: python_env.sh) loads the
# f32 exports itself and gives the same logits (1e-5), and a model made and saved by
# transformers (random weights, the export's config) starts a Loom run whose logits equal
# transformers' (1e-5).
# Bad input: a DiT checkpoint, --part with --format hf; init_from a directory whose
# architecture or config does not match, or that lacks a tensor.
# Usage: hf_export_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
prompt="And God said unto Moses"
source "$here/python_env.sh"
need_python transformers torch tokenizers numpy

for style in gpt2 llama; do
  extra=()
  [ $style = llama ] && extra=(--set model.heads=4 --set model.kv_heads=2)
  "$loom" train "$here/tiny_gpt.toml" --set run.out_dir="$work/$style" --set model.style=\"$style\" \
    --set model.context=64 --set train.steps=200 --set train.batch_size=8 --set optim.lr=3e-3 \
    --set eval.every=0 --set sample.tokens=0 "${extra[@]}" > "$work/$style.log" 2>&1 ||
    { fail "$style: training failed"; cat "$work/$style.log"; continue; }
  run=$work/$style/tiny_gpt
  model=(--set model.style=\"$style\" --set model.context=64 "${extra[@]}")
  # init_from: a run that starts from $1 (an HF directory) and takes no step of its own size.
  start_from() {
    "$loom" train "$here/tiny_gpt.toml" "${model[@]}" --set run.out_dir="$2" --set train.steps=1 \
      --set optim.lr=0 --set optim.warmup_steps=0 --set eval.every=0 --set sample.tokens=0 \
      --set train.init_from=\"$1\" > "$2.log" 2>&1
  }
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
      # Sharded, and back: the same logits, bit for bit.
      "$loom" ckpt export "$run" "$out-sharded" --format hf --shard-mb 0.03 > /dev/null ||
        fail "$style: sharded export failed"
      [ -f "$out-sharded/model.safetensors.index.json" ] && [ -f "$out-sharded/model-00002-of-0000$( \
        ls "$out-sharded" | grep -c '^model-0')".safetensors ] || fail "$style: no shards and index"
      start_from "$out-sharded" "$work/$style-back" || fail "$style: init_from the export: $(tail -2 "$work/$style-back.log")"
      "$loom" sample "$work/$style-back/tiny_gpt" --prompt "$prompt" --tokens 1 --logits "$work/$style-back.npy" > /dev/null
      cmp -s "$work/$style-back.npy" "$work/$style.npy" && echo "$style: exported in shards, init_from: identical logits" ||
        fail "$style: a run started from the export gives other logits"
      "$py" "$here/hf_transformers_logits.py" "$out" "$prompt" "$work/$style.npy" 1e-5 \
        "transformers loads the export" 2> /dev/null || fail "$style: transformers disagrees"
      # A model transformers made (random weights) and saved, into Loom.
      "$py" - "$out" "$work/$style-made" <<'PY' || fail "$style: transformers could not make a model"
import sys
import torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1]), dtype=torch.float32)
m.save_pretrained(sys.argv[2])
PY
      start_from "$work/$style-made" "$work/$style-made-run" ||
        fail "$style: init_from transformers' model: $(tail -2 "$work/$style-made-run.log")"
      "$loom" sample "$work/$style-made-run/tiny_gpt" --prompt "$prompt" --tokens 1 \
        --logits "$work/$style-made.npy" > /dev/null
      "$py" "$here/hf_transformers_logits.py" "$work/$style-made" "$prompt" \
        "$work/$style-made.npy" 1e-5 "a model transformers saved, started from in Loom" 2> /dev/null ||
        fail "$style: Loom's logits from transformers' model differ"
    fi
  done
done

# The tokenizer goes with the export: a run with Loom's own BPE, exported; its tokenizer.json
# read by Hugging Face's tokenizers gives Loom's ids on a chapter of text, and transformers its
# logits from its own tokenization of the prompt.
bible "Gen1:1-31" < /dev/null > "$work/gen1.txt"
"$loom" tokenizer train --input "$work/gen1.txt" --vocab 300 --out "$work/gen1.bpe" > /dev/null ||
  fail "tokenizer train failed"
"$loom" train "$here/tiny_gpt.toml" --set run.out_dir="$work/bpe" --set model.context=64 \
  --set model.vocab_size=300 --set data.tokenizer=\"$work/gen1.bpe\" --set train.steps=30 \
  --set eval.every=0 --set sample.tokens=0 > "$work/bpe.log" 2>&1 || fail "BPE run failed: $(tail -2 "$work/bpe.log")"
"$loom" ckpt export "$work/bpe/tiny_gpt" "$work/bpe-hf" --format hf > /dev/null || fail "BPE export failed"
[ -s "$work/bpe-hf/tokenizer.json" ] && [ -s "$work/bpe-hf/tokenizer_config.json" ] ||
  fail "the export has no tokenizer.json and tokenizer_config.json"
"$loom" tokenizer check --tokenizer "$work/bpe/tiny_gpt/tokenizer.bpe" --input "$work/gen1.txt" \
  --ids "$work/gen1-ids.npy" > /dev/null || fail "tokenizer check failed"
"$py" - "$work/bpe-hf/tokenizer.json" "$work/gen1.txt" "$work/gen1-ids.npy" <<'PY' ||
import sys
import numpy as np
from tokenizers import Tokenizer
ids = Tokenizer.from_file(sys.argv[1]).encode(open(sys.argv[2]).read(), add_special_tokens=False).ids
loom = np.load(sys.argv[3]).tolist()
print(f"the export's tokenizer.json in tokenizers: {len(loom)} tokens, "
      f"{sum(a != b for a, b in zip(ids, loom)) + abs(len(ids) - len(loom))} differ from Loom's")
sys.exit(0 if ids == loom else 1)
PY
  fail "the exported tokenizer.json tokenizes differently"
"$loom" sample "$work/bpe/tiny_gpt" --prompt "$prompt" --tokens 1 --logits "$work/bpe.npy" > /dev/null
"$py" "$here/hf_transformers_logits.py" "$work/bpe-hf" "$prompt" "$work/bpe.npy" 1e-5 \
  "transformers loads the BPE export" 2> /dev/null || fail "transformers disagrees on the BPE export"

# Bad input: one clear error each.
"$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/dit" > "$work/dit.log" 2>&1 ||
  fail "dit training failed"
"$loom" ckpt export "$work/dit/tiny_dit" "$work/x" --format hf > "$work/bad.log" 2>&1 &&
  fail "a DiT checkpoint was exported as a Hugging Face GPT"
grep -q "is a checkpoint of a dit model, not a gpt" "$work/bad.log" || fail "no model-kind error: $(cat "$work/bad.log")"
"$loom" ckpt export "$work/gpt2/tiny_gpt" "$work/x" --format hf --part ema > "$work/bad.log" 2>&1 &&
  fail "--part with --format hf was accepted"
grep -q "format hf writes the model" "$work/bad.log" || fail "no --part error: $(cat "$work/bad.log")"

model=(--set model.style=\"gpt2\" --set model.context=64)
bad_init() {  # expected-message hf-dir
  start_from "$2" "$work/bad-init" && fail "init_from $2 was accepted"
  grep -q "$1" "$work/bad-init.log" || fail "no '$1' for init_from $2: $(tail -1 "$work/bad-init.log")"
}
bad_init "architecture 'LlamaForCausalLM', but model.style \"gpt2\" is GPT2LMHeadModel" "$work/llama-hf-f32"
cp -r "$work/gpt2-hf-f32" "$work/gpt2-wide" && sed -i 's/"n_embd": 32/"n_embd": 48/' "$work/gpt2-wide/config.json"
bad_init "n_embd is 48, the run's model needs 32" "$work/gpt2-wide"
cp -r "$work/gpt2-hf-f32-sharded" "$work/gpt2-missing" && rm "$work/gpt2-missing/model-00002-of-"*
bad_init "gpt2-missing/model-00002-of-" "$work/gpt2-missing"
# A NaN in the weights: refused at the start, naming the file and the tensor (not a step that
# goes non-finite later with advice about checkpoints).
cp -r "$work/gpt2-hf-f32" "$work/gpt2-nan"
"$py" - "$work/gpt2-nan/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = sorted(k for k in header if k != "__metadata__")[0]
assert header[name]["dtype"] == "F32", header[name]
start = 8 + n + header[name]["data_offsets"][0]
data[start:start + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(data)
PY
bad_init "gpt2-nan: tensor '.*' holds 1 NaN or infinite value(s)" "$work/gpt2-nan"

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo PASS
