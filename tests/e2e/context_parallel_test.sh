#!/usr/bin/env bash
# Context parallelism changes nothing but memory and speed: the tiny GPT (GPT-2 style with
# learned positions, and Llama style with RoPE and grouped-query attention; causal) and DiT
# (bidirectional), 4 heads, depth 2, 10 steps, on 1 process vs ring attention over CP=2 and
# CP=4 (load-balanced chunks), Ulysses over CP=2, USP over CP=4 (a ring of 2 Ulysses groups of
# 2), and compositions CP2 x TP2 (with sequence parallelism), CP2 x ZeRO-3 on 2 and CP2 with
# selective recompute (the ring's result kept, not run again): losses to 1e-5 relative, final
# weights and AdamW moments to 1e-4. Llama with a sliding window of 5 positions under ring 4,
# Ulysses 2 and USP 2 x 2 the same. A run saved under CP2 x TP2 resumes on 1 process, and one saved on 1 process resumes
# under CP2 x TP2 and Ulysses CP2 x ZeRO-3, and each ends where the uninterrupted run ends. The
# GPT under bf16 autocast with USP 2 x 2 (the ring's blocks and kernels in bf16) against one
# process in bf16: losses to 1e-4, weights to 5e-2 of each tensor's largest. Sequences or heads
# that do not split fail before any work with one clear error.
# Usage: context_parallel_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/parallel_lib.sh"

common=(--set train.steps=10 --set train.log_every=1 --set model.depth=2 --set model.heads=4
  --set train.batch_size=8)
# Sliding-window attention (mistral: 5 of 16 positions) under ring (load-balanced chunks of 2),
# Ulysses and USP: each block of keys seen through the window, or skipped. Latent attention
# (mla) under ring and Ulysses: its heads' q, k (RoPE part shared) and padded v take the same
# cores.
for model in gpt2 llama dit mistral mla; do
  model_config $model
  ref=$work/$model-np1
  "$loom" train "$cfg" "${common[@]}" "${extra[@]}" --set run.out_dir="$ref" > "$ref.log" 2>&1 ||
    fail "$model: single-process run failed"
  layouts="ring2 ring4 ulysses2 usp2x2 ring2-tp2-sp ring2-zero3x2 ring2-selective"
  [ $model = mistral ] && layouts="ring4 ulysses2 usp2x2"
  [ $model = mla ] && layouts="ring4 ulysses2"
  for layout in $layouts; do
    out=$work/$model-$layout
    case $layout in
      ring2) np=2; par=(--set parallel.cp=2) ;;
      ring4) np=4; par=(--set parallel.cp=4) ;;
      ulysses2) np=2; par=(--set parallel.cp=2 --set parallel.context_parallel=ulysses) ;;
      usp2x2) np=4; par=(--set parallel.cp=4 --set parallel.context_parallel=usp --set parallel.ulysses=2) ;;
      ring2-tp2-sp) np=4; par=(--set parallel.cp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true) ;;
      ring2-zero3x2) np=4; par=(--set parallel.cp=2 --set parallel.data_parallel=zero3) ;;
      ring2-selective) np=2; par=(--set parallel.cp=2 --set parallel.activation_checkpointing=selective) ;;
    esac
    "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${common[@]}" "${extra[@]}" "${par[@]}" \
      --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "$model $layout: run failed"; tail -3 "$out.log"; continue; }
    parity "$model $layout" "$ref/$name" "$out/$name"
  done
done

# bf16 autocast: USP 2 x 2 against one process, both in bf16.
cfg=$here/tiny_gpt.toml
bf16=("${common[@]}" --set eval.every=0 --set sample.tokens=0 --set train.precision=bf16)
"$loom" train "$cfg" "${bf16[@]}" --set run.out_dir="$work/bf16-np1" > "$work/bf16-np1.log" 2>&1 ||
  fail "bf16: single-process run failed"
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${bf16[@]}" --set parallel.cp=4 \
  --set parallel.context_parallel=usp --set parallel.ulysses=2 --set run.out_dir="$work/bf16-usp" \
  > "$work/bf16-usp.log" 2>&1 || fail "bf16 usp2x2: run failed"
PARITY_RTOL=1e-4 PARITY_WEIGHTS_RTOL=5e-2 parity "gpt2 bf16 usp2x2" "$work/bf16-np1/tiny_gpt" \
  "$work/bf16-usp/tiny_gpt"

# Save under CP2 x TP2, resume on 1 process.
cfg=$here/tiny_gpt.toml
gpt=("${common[@]}" --set eval.every=0 --set sample.tokens=0)
out=$work/reshard
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${gpt[@]}" --set train.stop_after=5 \
  --set parallel.cp=2 --set parallel.tp=2 --set run.out_dir="$out" > "$out.log" 2>&1 ||
  fail "reshard: first half failed"
"$loom" train "$cfg" "${gpt[@]}" --resume --set run.out_dir="$out" > "$out-2.log" 2>&1 ||
  fail "reshard: second half failed"
grep -q "resumed from .*step-000005 at step 5" "$out-2.log" || fail "reshard: did not resume at step 5"
parity "gpt2 cp2 x tp2 to step 5, then 1 process to 10," "$work/gpt2-np1/tiny_gpt" "$out/tiny_gpt"

# And into context parallelism: saved on 1 process, resumed under CP2 x TP2 and under Ulysses
# CP2 x ZeRO-3 on 2.
base=$work/into-cp
"$loom" train "$cfg" "${gpt[@]}" --set train.stop_after=5 --set run.out_dir="$base" > "$base.log" 2>&1 ||
  fail "into cp: first half failed"
for target in ring2-tp2 ulysses2-zero3x2; do
  out=$work/into-$target
  rm -rf "$out" && cp -r "$base" "$out"
  case $target in
    ring2-tp2) par=(--set parallel.cp=2 --set parallel.tp=2) ;;
    ulysses2-zero3x2) par=(--set parallel.cp=2 --set parallel.context_parallel=ulysses --set parallel.data_parallel=zero3) ;;
  esac
  "$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${gpt[@]}" "${par[@]}" --resume \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "into $target: second half failed"; continue; }
  grep -q "resumed from .*step-000005 at step 5" "$out.log" || fail "into $target: did not resume at step 5"
  parity "gpt2 1 process to step 5, then $target to 10," "$work/gpt2-np1/tiny_gpt" "$out/tiny_gpt"
done

# Bad layouts: one clear error, non-zero exit, before any step.
bad 4 "ring context parallelism splits the 20 tokens (model.context) into 8 chunks" "$cfg" "${gpt[@]}" \
  --set model.context=20 --set parallel.cp=4
bad 4 "Ulysses attention splits each tensor-parallel rank's 2 heads (2 key/value heads) over parallel.cp 4" \
  "$cfg" "${gpt[@]}" --set model.heads=2 --set parallel.cp=4 --set parallel.context_parallel=ulysses
bad 2 "parallel.context_parallel 'striped' (expected ring, ulysses or usp)" "$cfg" "${gpt[@]}" \
  --set parallel.cp=2 --set parallel.context_parallel=striped
usp=(--set parallel.cp=4 --set parallel.context_parallel=usp --set parallel.ulysses=2)
bad 4 "USP context parallelism splits the 18 tokens (model.context) into 4 chunks for its ring of 2" \
  "$cfg" "${gpt[@]}" --set model.context=18 "${usp[@]}"
bad 4 "USP's Ulysses attention splits each tensor-parallel rank's 4 heads (1 key/value heads) over parallel.ulysses 2" \
  "$cfg" "${gpt[@]}" --set model.style=llama --set model.kv_heads=1 "${usp[@]}"
bad 4 "parallel.ulysses (4) must be at least 2 and divide cp leaving a ring of at least 2" \
  "$cfg" "${gpt[@]}" --set parallel.cp=4 --set parallel.context_parallel=usp --set parallel.ulysses=4
bad 2 "parallel.ulysses is the Ulysses degree of parallel.context_parallel \"usp\" (here \"ring\")" \
  "$cfg" "${gpt[@]}" --set parallel.cp=2 --set parallel.ulysses=2

finish
