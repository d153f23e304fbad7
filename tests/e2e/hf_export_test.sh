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
# Models made by transformers from its own config defaults (GPT-2's dropout 0.1 and n_inner null,
# Llama's rms_norm_eps 1e-5 without head_dim, Llama 3.x's scaled RoPE, Qwen2's q, k, v biases,
# Mixtral's experts, Mistral's sliding window of 8 (the prompt is 23 tokens) and one without a
# window, Qwen2 with a window in every layer, Llama with linear RoPE scaling by 4) start Loom
# runs with transformers' logits (1e-5); the scaled RoPEs, Qwen2s, Mixtral and the windowed
# Mistral export back to them. A Mixtral with
# router jitter, a mixture with shared experts, a window into a run without one and a window on
# GPT-2 are refused by name.
# Bad input: a DiT checkpoint, --part with --format hf; init_from a directory whose
# architecture or config does not match, or that lacks a tensor; a scaled RoPE, a head_dim
# Loom does not compute, an unknown field and another epsilon, each named.
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

# Models as transformers writes them, from its config classes' defaults: GPT-2 with dropout 0.1
# and n_inner null, Llama 2-style with rms_norm_eps 1e-5 and no head_dim in the file (both
# transformers' defaults where absent), Llama 3.x's scaled RoPE (rope_type llama3), Qwen2 (q, k,
# v biases). Each starts a Loom run (model.norm_eps = 1e-5 for the Llamas, the rope_* keys for
# the scaled one, model.qkv_bias for Qwen2) whose logits equal transformers' (1e-5); the GPT-2's
# dropout is said, not applied.
tf=("$work/tf-gpt2" "$work/tf-llama" "$work/tf-llama3" "$work/tf-qwen2" "$work/tf-mixtral"
  "$work/tf-mistral" "$work/tf-mistral0" "$work/tf-qwen2sw" "$work/tf-llamalin")
"$py" - "${tf[@]}" <<'PY' || fail "transformers could not make the models"
import json, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=256,
                           n_positions=64)).save_pretrained(sys.argv[1])
LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                             max_position_embeddings=64, rms_norm_eps=1e-5)).save_pretrained(sys.argv[2])
path = sys.argv[2] + "/config.json"
config = json.load(open(path))
del config["head_dim"]
json.dump(config, open(path, "w"))
# Llama 3.x's scaled RoPE, with an original context of 100 so that over a head of 8 dims one
# frequency is kept, one blended and two slowed.
LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                             max_position_embeddings=128, rms_norm_eps=1e-5,
                             rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0,
                                              "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 100}
                             )).save_pretrained(sys.argv[3])
# Qwen2: Llama's blocks with biases on q, k and v.
from transformers import Qwen2Config, Qwen2ForCausalLM
Qwen2ForCausalLM(Qwen2Config(hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                             max_position_embeddings=64, rms_norm_eps=1e-5)).save_pretrained(sys.argv[4])
# Mixtral: a mixture of 4 SwiGLU experts in every block, the top 2 of a softmax renormalised.
from transformers import MixtralConfig, MixtralForCausalLM
MixtralForCausalLM(MixtralConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                 max_position_embeddings=64, rms_norm_eps=1e-5,
                                 num_local_experts=4, num_experts_per_tok=2)).save_pretrained(sys.argv[5])
# Mistral: Llama's blocks with a sliding window of 8 keys (the prompt is longer); one without a
# window (sliding_window null, as Mistral 7B v0.2 on); Qwen2 with its window in every layer.
from transformers import MistralConfig, MistralForCausalLM
for window, out in ((8, sys.argv[6]), (None, sys.argv[7])):
    MistralForCausalLM(MistralConfig(hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                     max_position_embeddings=64, rms_norm_eps=1e-5,
                                     sliding_window=window)).save_pretrained(out)
Qwen2ForCausalLM(Qwen2Config(hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                             max_position_embeddings=64, rms_norm_eps=1e-5, use_sliding_window=True,
                             sliding_window=6, max_window_layers=0)).save_pretrained(sys.argv[8])
# Linear RoPE scaling (position interpolation) by 4.
LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                             max_position_embeddings=64, rms_norm_eps=1e-5,
                             rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                              "factor": 4.0})).save_pretrained(sys.argv[9])
PY
tf_start() {  # hf-dir run-dir model-settings...
  local from=$1 to=$2
  shift 2
  "$loom" train "$here/tiny_gpt.toml" --set model.context=64 --set model.depth=2 "$@" \
    --set run.out_dir="$to" --set train.steps=1 --set optim.lr=0 --set optim.warmup_steps=0 \
    --set eval.every=0 --set sample.tokens=0 --set train.init_from=\"$from\" > "$to.log" 2>&1
}
tf_gpt2=(--set model.style=\"gpt2\")
tf_llama=(--set model.style=\"llama\" --set model.heads=4 --set model.kv_heads=2
  --set model.swiglu_hidden=96 --set model.norm_eps=1e-5)
tf_llama3=("${tf_llama[@]}" --set model.context=128 --set model.rope_scaling_factor=8
  --set model.rope_low_freq_factor=1 --set model.rope_high_freq_factor=4
  --set model.rope_original_context=100)
tf_mixtral=("${tf_llama[@]}" --set model.rope_theta=1000000.0 --set moe.experts=4 --set moe.top_k=2
  --set moe.hidden=48)
for style in gpt2 llama llama3 qwen2 mixtral mistral mistral0 qwen2sw llamalin; do
  settings=("${tf_gpt2[@]}")
  [ $style = mixtral ] && settings=("${tf_mixtral[@]}")
  [ $style = llama ] && settings=("${tf_llama[@]}")
  [ $style = mistral ] && settings=("${tf_llama[@]}" --set model.sliding_window=8)
  [ $style = mistral0 ] && settings=("${tf_llama[@]}")
  [ $style = llamalin ] && settings=("${tf_llama[@]}" --set model.rope_scaling_factor=4
    --set 'model.rope_scaling_type="linear"')
  [ $style = qwen2sw ] && settings=("${tf_llama[@]}" --set model.qkv_bias=true --set model.sliding_window=6)
  [ $style = llama3 ] && settings=("${tf_llama3[@]}")
  [ $style = qwen2 ] && settings=("${tf_llama[@]}" --set model.qkv_bias=true)
  tf_start "$work/tf-$style" "$work/tf-$style-run" "${settings[@]}" ||
    { fail "init_from transformers' own $style: $(tail -2 "$work/tf-$style-run.log")"; continue; }
  "$loom" sample "$work/tf-$style-run/tiny_gpt" --prompt "$prompt" --tokens 1 \
    --logits "$work/tf-$style.npy" > /dev/null
  "$py" "$here/hf_transformers_logits.py" "$work/tf-$style" "$prompt" "$work/tf-$style.npy" 1e-5 \
    "transformers' own $style config, started from in Loom" 2> /dev/null ||
    fail "$style: Loom's logits from transformers' own config differ"
done
# The scaled RoPE, the biases, the experts and the windows back out: Loom's exports of those
# runs, loaded by transformers, give Loom's logits.
for style in llama3 qwen2 mixtral mistral qwen2sw llamalin; do
  "$loom" ckpt export "$work/tf-$style-run/tiny_gpt" "$work/tf-$style-back" --format hf > /dev/null ||
    fail "export of the $style run failed"
  "$py" "$here/hf_transformers_logits.py" "$work/tf-$style-back" "$prompt" "$work/tf-$style.npy" \
    1e-5 "Loom's $style export, in transformers" 2> /dev/null ||
    fail "transformers disagrees on the $style export"
done
grep -q "sets dropout (.*attn_pdrop=0.1.*); Loom trains without dropout" "$work/tf-gpt2-run.log" ||
  fail "the GPT-2's dropout was not said: $(grep -m1 dropout "$work/tf-gpt2-run.log")"
# What cannot be honoured is refused naming the field: Llama 3.x's scaled RoPE into a run that
# does not scale it, YaRN, a head_dim that is not hidden_size / num_attention_heads, a field
# Loom does not know, another epsilon.
tf_bad() {  # expected-message edit-of-config
  rm -rf "$work/tf-bad" && cp -r "$work/tf-llama" "$work/tf-bad"
  "$py" -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); $2; json.dump(c, open(p, 'w'))" \
    "$work/tf-bad/config.json"
  tf_start "$work/tf-bad" "$work/tf-bad-run" "${tf_llama[@]}" && fail "init_from accepted: $2"
  grep -q "$1" "$work/tf-bad-run.log" || fail "no '$1' for $2: $(tail -1 "$work/tf-bad-run.log")"
}
tf_bad "rope_parameters.rope_type 'llama3': the run's model does not scale its RoPE" \
  "c['rope_parameters'] = {'rope_type': 'llama3', 'factor': 8.0, 'rope_theta': 10000.0}"
tf_bad "rope_scaling.rope_type 'yarn': Loom's RoPE is the default one, Llama 3.x's (llama3) or linear" \
  "c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0}"
tf_bad "head_dim is 16, the run's model needs 8" "c['head_dim'] = 16"
tf_bad "field sliding_window (4096) is not one Loom knows" "c['sliding_window'] = 4096"
tf_bad "rms_norm_eps is 1e-06, the run's model needs 1e-05" "c['rms_norm_eps'] = 1e-6"
# A start from hf-dir with these settings that must fail with expected-message.
tf_refused() {  # expected-message hf-dir model-settings...
  local message=$1 from=$2
  shift 2
  tf_start "$from" "$work/tf-bad-run" "$@" && fail "init_from $from accepted: $*"
  grep -q "$message" "$work/tf-bad-run.log" ||
    fail "no '$message' for $from: $(tail -1 "$work/tf-bad-run.log")"
}
# A window the run's model does not have, and a window GPT-2 cannot hold.
tf_refused "sliding_window is 8, the run's model needs null" "$work/tf-mistral" "${tf_llama[@]}"
tf_refused "GPT2LMHeadModel has no sliding window" "$work/tf-gpt2" "${tf_gpt2[@]}" \
  --set model.sliding_window=4
# A Mixtral whose router adds jitter in training, and a mixture Mixtral has no layout for.
rm -rf "$work/tf-bad" && cp -r "$work/tf-mixtral" "$work/tf-bad"
"$py" -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c['router_jitter_noise'] = 0.1; json.dump(c, open(p, 'w'))" \
  "$work/tf-bad/config.json"
tf_refused "router_jitter_noise is 0.1, the run's model needs 0" "$work/tf-bad" "${tf_mixtral[@]}"
tf_refused "is not MixtralForCausalLM's" "$work/tf-mixtral" "${tf_mixtral[@]}" \
  --set moe.shared_experts=1

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
