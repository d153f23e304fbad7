#!/usr/bin/env bash
# A GPT with mixture-of-experts blocks (nn/moe.h) through `loom train`: the tiny llama config,
# depth 2, 4 SwiGLU experts top-2 plus one shared expert, aux-loss-free balancing on.
# - metrics.jsonl: every step's tokens per expert (summing to tokens x top_k per layer), max /
#   mean load, the balancing losses and entropy; the progress line's summary; the parameter
#   counts (total and active per token); the selection biases moving and checkpointed.
# - activation checkpointing is bitwise equal (the recompute is counted once);
# - a run stopped at step 10 and resumed ends bitwise where the uninterrupted run ends;
# - DDP on 2 processes, ZeRO-3 on 2 and on 4, tensor parallelism 2 on the other layers (the
#   experts whole on each tp rank; also with sequence parallelism: each tp rank routes its
#   share of the tokens), context parallelism 2 (ring, Ulysses, and ring x ZeRO-3 on 4: each
#   cp rank routes its rows' tokens), pipeline parallelism 2 (also x ZeRO-3 on 4: each stage
#   balances its own layers, the checkpoint gathers every stage's selection biases), a pp 2
#   checkpoint and a ZeRO-3 x4 one resumed on 1 process,
#   equal to 1 process within the tolerances of the other parallel tests (the Switch loss is
#   off there: it is computed per rank's micro-batch, as in Switch and Megatron, so it differs
#   with the layout by design; the z-loss and the summed loads do not);
# - expert parallelism (parallel.ep 2 on 2 and 4 processes, ep 4 on 4, ep 2 x tp 2, ep 2 with
#   ZeRO-1 and ZeRO-3, ep 2 x tp 2 with ZeRO-2, ep 2 with activation checkpointing, ep 2 with
#   HSDP (ZeRO-3, 2 replicas), ep 2 x cp 2, ep 2 x pp 2, and four axes on 8 processes: pp 2 x
#   dp 2 (ZeRO-3) x tp 2 with sequence parallelism, the experts over ep 2: each rank holds a
#   share of the experts, tokens
#   dispatched by all-to-all) equal to 1 process, and an ep 4 ZeRO-3 checkpoint
#   resumed at ep 2 (DDP) and on 1 process;
# - `loom eval` of a checkpoint; bad input, one clear error each.
# - the tiny DiT with mixture blocks: trains, resumes bitwise, DDP on 2 equals 1 process, and
#   `loom sample` draws from its checkpoint.
# Usage: moe_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/parallel_lib.sh"

cfg=$here/tiny_gpt.toml
common=(--set train.steps=20 --set train.log_every=1 --set model.depth=2 --set train.batch_size=8
  --set run.id=cmp --set eval.every=0 --set sample.tokens=0 --set model.style=llama
  --set moe.experts=4 --set moe.top_k=2 --set moe.hidden=32 --set moe.shared_experts=1
  --set moe.bias_rate=0.01)
run() {  # run NAME [ARGS...]: one process
  local name=$1; shift
  "$loom" train "$cfg" "${common[@]}" "$@" --set run.out_dir="$work/$name" > "$work/$name.log" 2>&1 ||
    fail "$name: run failed ($(grep -m1 -i error "$work/$name.log"))"
}
run np1
ref=$work/np1/tiny_gpt
grep -q "parameters (.* active per token: 4 experts, top 2)" "$work/np1.log" ||
  fail "no total / active parameter count: $(grep -m1 'gpt (' "$work/np1.log")"
grep -q "| moe load max/mean [0-9.]*, aux [0-9.]* |" "$work/np1.log" || fail "no moe summary in the progress line"
/usr/bin/python3 - "$ref" <<'EOF' || fail "moe metrics or selection biases wrong"
import json, sys
run = sys.argv[1]
lines = [m for m in map(json.loads, open(run + "/metrics.jsonl")) if "loss" in m]  # steps
assert len(lines) == 20, len(lines)
tokens = 8 * 16  # batch x context
for m in lines:
    layers = m["moe"]["layers"]
    assert sorted(layers) == ["blocks.0.mlp", "blocks.1.mlp"], layers
    for name, l in layers.items():
        assert sum(l["load"]) == tokens * 2, (m["step"], name, l["load"])
        ratio = max(l["load"]) / (sum(l["load"]) / 4)
        assert abs(l["max_over_mean"] - ratio) < 1e-9, (l["max_over_mean"], ratio)
        assert 0 < l["entropy"] <= 1.3863 and l["aux_loss"] > 0 and l["z_loss"] > 0, l
state = json.load(open(run + "/step-000020/trainer_state.json"))
biases = state["moe_selection_bias"]
assert sorted(biases) == ["blocks.0.mlp", "blocks.1.mlp"], biases
# 20 updates of +-0.01 (or 0 for a load exactly at the mean): nonzero, multiples of 0.01.
for name, b in biases.items():
    assert len(b) == 4 and any(abs(v) > 0 for v in b), (name, b)
    assert all(abs(v) <= 0.2 + 1e-6 for v in b), (name, b)
print("moe metrics: loads sum to tokens x 2 per layer; biases", biases)
EOF

# Activation checkpointing: the recompute routes the same tokens and is counted once.
run ac --set parallel.activation_checkpointing=full
for f in rank-00000.safetensors trainer_state.json; do
  [ -f "$ref/step-000020/$f" ] || fail "no $f"
  cmp -s "$ref/step-000020/$f" "$work/ac/tiny_gpt/step-000020/$f" ||
    [ $f = trainer_state.json ] || fail "activation checkpointing changed $f"
done
/usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(p + "/step-000020/trainer_state.json"))["moe_selection_bias"] for p in sys.argv[1:])
assert a == b, (a, b)' "$ref" "$work/ac/tiny_gpt" || fail "activation checkpointing changed the selection biases"

# Stop at step 10, resume: bitwise the uninterrupted run (weights, moments, selection biases).
run half --set train.stop_after=10
"$loom" train "$cfg" "${common[@]}" --resume --set run.out_dir="$work/half" > "$work/half2.log" 2>&1 ||
  fail "resume failed"
grep -q "resumed from .*step-000010 at step 10" "$work/half2.log" || fail "did not resume at step 10"
cmp -s "$ref/step-000020/rank-00000.safetensors" "$work/half/tiny_gpt/step-000020/rank-00000.safetensors" ||
  fail "resumed run differs from the uninterrupted one"
/usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(p + "/step-000020/trainer_state.json"))["moe_selection_bias"] for p in sys.argv[1:])
assert a == b, (a, b)' "$ref" "$work/half/tiny_gpt" || fail "resume changed the selection biases"

# Data parallelism, without the Switch loss (see the header).
noaux=(--set moe.aux_loss=0)
run np1-noaux "${noaux[@]}"
for layout in ddp-np2 zero3-np2 zero3-np4 tp2-np2 tp2sp-np2 cp2-np2 cp2ulysses-np2 cp2zero3-np4 \
  pp2-np2 pp2zero3-np4; do
  np=${layout##*np}
  dp=${layout%%-*}
  extra=()
  case $dp in
    tp2) dp=ddp; extra=(--set parallel.tp=2) ;;
    tp2sp) dp=ddp; extra=(--set parallel.tp=2 --set parallel.sequence_parallel=true) ;;
    cp2) dp=ddp; extra=(--set parallel.cp=2) ;;
    cp2ulysses) dp=ddp; extra=(--set parallel.cp=2 --set parallel.context_parallel=ulysses) ;;
    cp2zero3) dp=zero3; extra=(--set parallel.cp=2) ;;
    pp2) dp=ddp; extra=(--set parallel.pp=2) ;;
    pp2zero3) dp=zero3; extra=(--set parallel.pp=2) ;;
  esac
  "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${common[@]}" "${noaux[@]}" "${extra[@]}" \
    --set parallel.data_parallel=$dp --set run.out_dir="$work/$layout" > "$work/$layout.log" 2>&1 ||
    fail "$layout failed ($(grep -m1 -i error "$work/$layout.log"))"
  parity "moe $layout" "$work/np1-noaux/tiny_gpt" "$work/$layout/tiny_gpt"
done
# Expert parallelism.
for layout in ep2-np2 ep2-np4 ep4-np4 ep2tp2-np4 ep2zero3-np4 ep2zero1-np4 ep2zero2tp2-np4 \
  ep2ac-np2 ep2hsdp-np4 ep2cp2-np4 ep2pp2-np4 ep2pp2tp2sp-np8; do
  np=${layout##*np}
  ep=${layout%%-*}
  extra=()
  case $ep in
    ep2tp2) ep=ep2; extra=(--set parallel.tp=2) ;;
    ep2zero3) ep=ep2; extra=(--set parallel.data_parallel=zero3) ;;
    ep2zero1) ep=ep2; extra=(--set parallel.data_parallel=zero1) ;;
    ep2zero2tp2) ep=ep2; extra=(--set parallel.data_parallel=zero2 --set parallel.tp=2) ;;
    ep2ac) ep=ep2; extra=(--set parallel.activation_checkpointing=full) ;;
    ep2hsdp) ep=ep2; extra=(--set parallel.data_parallel=zero3 --set parallel.dp_replicate=2) ;;
    ep2cp2) ep=ep2; extra=(--set parallel.cp=2) ;;
    ep2pp2) ep=ep2; extra=(--set parallel.pp=2) ;;
    ep2pp2tp2sp) ep=ep2; extra=(--set parallel.pp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true
      --set parallel.data_parallel=zero3) ;;  # 4 axes: pp x dp_shard (ZeRO-3) x tp, experts over ep
  esac
  ep=${ep#ep}
  "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${common[@]}" "${noaux[@]}" "${extra[@]}" \
    --set parallel.ep=$ep --set run.out_dir="$work/$layout" > "$work/$layout.log" 2>&1 ||
    fail "$layout failed ($(grep -m1 -i error "$work/$layout.log"))"
  grep -q "experts over ep $ep" "$work/$layout.log" || fail "$layout: no expert parallelism in the layout line"
  parity "moe $layout" "$work/np1-noaux/tiny_gpt" "$work/$layout/tiny_gpt"
done
# An ep 4 ZeRO-3 checkpoint of step 10 resumed at ep 2 with DDP (on 2 processes) and on 1.
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" "${noaux[@]}" --set parallel.ep=4 \
  --set parallel.data_parallel=zero3 \
  --set train.stop_after=10 --set run.out_dir="$work/ep4-half" > "$work/ep4-half.log" 2>&1 ||
  fail "ep4: first half failed"
for target in ep2 np1; do
  out=$work/ep4-then-$target
  rm -rf "$out" && cp -r "$work/ep4-half" "$out"
  if [ $target = ep2 ]; then
    launch=("$mpirun" --oversubscribe -np 2)
    extra=(--set parallel.ep=2)
  else
    launch=()
    extra=()
  fi
  "${launch[@]}" "$loom" train "$cfg" "${common[@]}" "${noaux[@]}" "${extra[@]}" --resume \
    --set run.out_dir="$out" > "$out.log" 2>&1 || fail "ep4 then $target: second half failed"
  grep -q "resumed from .*step-000010 at step 10" "$out.log" || fail "ep4 then $target: did not resume"
  parity "moe ep4 to step 10, then $target" "$work/np1-noaux/tiny_gpt" "$out/tiny_gpt"
done
# A pipeline's checkpoint of step 10 (each stage's selection biases gathered into it) resumed on
# 1 process.
"$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" "${noaux[@]}" --set parallel.pp=2 \
  --set train.stop_after=10 --set run.out_dir="$work/pp-half" > "$work/pp-half.log" 2>&1 ||
  fail "pp2: first half failed"
"$loom" train "$cfg" "${common[@]}" "${noaux[@]}" --resume --set run.out_dir="$work/pp-half" \
  > "$work/pp-half2.log" 2>&1 || fail "pp2 then 1 process: second half failed ($(grep -m1 -i error "$work/pp-half2.log"))"
parity "moe pp2 to step 10, then 1 process" "$work/np1-noaux/tiny_gpt" "$work/pp-half/tiny_gpt"
# A ZeRO-3 x4 checkpoint of step 10 resumed on 1 process.
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" "${noaux[@]}" \
  --set parallel.data_parallel=zero3 --set train.stop_after=10 --set run.out_dir="$work/reshard" \
  > "$work/reshard.log" 2>&1 || fail "reshard: first half failed"
"$loom" train "$cfg" "${common[@]}" "${noaux[@]}" --resume --set run.out_dir="$work/reshard" \
  > "$work/reshard2.log" 2>&1 || fail "reshard: second half failed"
parity "moe zero3 x4 to step 10, then 1 process" "$work/np1-noaux/tiny_gpt" "$work/reshard/tiny_gpt"

# The checkpoint evaluates like any GPT's (with its selection biases).
"$loom" eval "$ref/step-000020" > "$work/eval.log" 2>&1 && grep -q "held-out loss" "$work/eval.log" ||
  fail "loom eval of a moe checkpoint: $(tail -1 "$work/eval.log")"
"$loom" ckpt export "$ref/step-000020" "$work/hf" --format hf > "$work/hf.log" 2>&1 &&
  fail "hf export of a mixture accepted"
grep -q "mixture of experts" "$work/hf.log" || fail "hf export: no clear error: $(tail -1 "$work/hf.log")"

# The DiT with a mixture of GELU experts in every block.
dit=(--set train.steps=12 --set train.log_every=1 --set model.depth=2 --set run.id=cmp
  --set sample.per_class=1 --set moe.experts=4 --set moe.bias_rate=0.01 --set moe.aux_loss=0)
"$loom" train "$here/tiny_dit.toml" "${dit[@]}" --set run.out_dir="$work/dit" > "$work/dit.log" 2>&1 ||
  fail "dit moe: run failed ($(grep -m1 -i error "$work/dit.log"))"
grep -q "dit: .* parameters (.* active per token: 4 experts, top 2)" "$work/dit.log" ||
  fail "dit moe: no active parameter count"
grep -q '"moe":{"max_over_mean"' "$work/dit/tiny_dit/metrics.jsonl" || fail "dit moe: no moe metrics"
"$loom" train "$here/tiny_dit.toml" "${dit[@]}" --set train.stop_after=6 --set run.out_dir="$work/dit-half" \
  > "$work/dit-half.log" 2>&1 || fail "dit moe: first half failed"
"$loom" train "$here/tiny_dit.toml" "${dit[@]}" --resume --set run.out_dir="$work/dit-half" \
  > "$work/dit-half2.log" 2>&1 || fail "dit moe: resume failed"
cmp -s "$work/dit/tiny_dit/step-000012/rank-00000.safetensors" \
  "$work/dit-half/tiny_dit/step-000012/rank-00000.safetensors" || fail "dit moe: resumed run differs"
"$mpirun" --oversubscribe -np 2 "$loom" train "$here/tiny_dit.toml" "${dit[@]}" \
  --set run.out_dir="$work/dit-np2" > "$work/dit-np2.log" 2>&1 || fail "dit moe: np2 failed"
parity "dit moe ddp-np2" "$work/dit/tiny_dit" "$work/dit-np2/tiny_dit"
(cd "$work" && "$loom" sample "$work/dit/tiny_dit/step-000012" --per-class 1 --steps 2 \
  --png "$work/dit-samples.png" > "$work/dit-sample.log" 2>&1) && [ -s "$work/dit-samples.png" ] ||
  fail "dit moe: loom sample failed: $(tail -1 "$work/dit-sample.log")"

bad 1 "moe.top_k 5 must be between 1 and moe.experts (4)" "$cfg" "${common[@]}" --set moe.top_k=5
bad 1 "moe.gating 'dense'" "$cfg" "${common[@]}" --set moe.gating=dense
bad 1 "moe.every must be at least 1" "$cfg" "${common[@]}" --set moe.every=0
bad 1 "moe.top_k" "$cfg" --set moe.top_k=2  # without moe.experts: an unknown key
bad 2 "parallel.ep 3 does not divide moe.experts 4" "$cfg" "${common[@]}" --set parallel.ep=3
bad 3 "parallel.ep 2 does not divide the 3 data-parallel ranks" "$cfg" "${common[@]}" --set parallel.ep=2 \
  --set train.batch_size=12
bad 2 "but the model has none" "$cfg" --set parallel.ep=2
finish
