#!/usr/bin/env bash
# Pipeline parallelism changes nothing but memory and speed: the tiny GPT (GPT-2 style with a
# tied embedding held by both pipeline ends, Llama style with an untied head, and a hybrid of
# Mamba-2 and attention blocks, also under DDP, ZeRO-3 and activation checkpointing; refused with
# one clear error under CP, and under TP when its groups do not split; and Muon under DDP,
# ZeRO-1/2/3, HSDP and PP x ZeRO-3) and DiT (the
# conditioning passed between stages with the tokens), 4 blocks, a
# step of 4 micro-batches (train.grad_accum), 10 steps, on 1 process vs PP=2 and PP=4 with each
# schedule (GPipe, 1F1B, interleaved 1F1B with 2 chunks per rank, ZB-H1 with each backward
# split into B and W passes) and compositions PP2 x TP2 (with sequence parallelism; the
# vocabulary split on each end, a tied embedding alike on both), PP2 x DDP2,
# PP2 x ZeRO-3 on 2 (also under ZB-H1) and PP2 x TP2 x ZeRO-2 on 2
# (8 processes): losses to 1e-5 relative, final weights and AdamW moments to 1e-4.
# Held-out evaluation runs through the pipeline and reports the 1-process loss. A run saved
# under PP2 x TP2 resumes under DP4 (ZeRO-2) and TP4, one saved under ZeRO-3 on 4 resumes under
# PP2 x TP2 and PP4, and each ends where the uninterrupted run ends. HSDP (2 replicas x 2
# ZeRO-3 shards) with TP 2, CP 2 and PP 2 on 8 processes, each equal to 1 process.
# Bad layouts (more stages than blocks, an interleaved schedule the micro-batches do not fit) fail before any work with one clear error.
# Usage: pipeline_parallel_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
cfg=$here/tiny_gpt.toml
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/parallel_lib.sh"

common=(--set train.steps=10 --set train.log_every=1 --set model.depth=4 --set model.heads=4
  --set train.batch_size=4 --set train.grad_accum=4 --set eval.every=0 --set sample.tokens=0)
hybrid=(--set model.style=llama --set 'model.mixers="MA"' --set model.ssm_state=8
  --set model.ssm_head_dim=16 --set model.ssm_chunk=4)
for model in gpt2 llama hybrid; do
  extra=()
  [ $model = llama ] && extra=(--set model.style=llama --set model.kv_heads=2)
  [ $model = hybrid ] && extra=("${hybrid[@]}")
  ref=$work/$model-np1
  "$loom" train "$cfg" "${common[@]}" "${extra[@]}" --set run.out_dir="$ref" > "$ref.log" 2>&1 ||
    fail "$model: single-process run failed"
  layouts="pp2-gpipe pp2-1f1b pp2-interleaved pp4-gpipe pp4-1f1b pp2-zbh1 pp4-zbh1 pp2-tp2-sp pp2-ddp2
    pp2-zero3x2 pp2-zbh1-zero3x2 pp2-tp2-zero2x2"
  [ $model = llama ] && layouts="pp2-interleaved pp4-1f1b pp4-zbh1 pp2-tp2-sp pp2-zero3x2"
  [ $model = hybrid ] && layouts="pp2-1f1b pp2-ddp2 pp2-zero3x2 ac-full"
  for layout in $layouts; do
    out=$work/$model-$layout
    case $layout in
      ac-*) np=1; par=(--set parallel.activation_checkpointing=full) ;;
      pp2-*) np=2; par=(--set parallel.pp=2) ;;
      pp4-*) np=4; par=(--set parallel.pp=4) ;;
    esac
    case $layout in
      *-gpipe) par+=(--set parallel.pipeline_schedule=gpipe) ;;
      *-1f1b) par+=(--set parallel.pipeline_schedule=1f1b) ;;
      *-zbh1) par+=(--set parallel.pipeline_schedule=zb-h1) ;;
      *-interleaved) par+=(--set parallel.pipeline_schedule=interleaved --set parallel.pipeline_chunks=2) ;;
      *-tp2-sp) np=4; par+=(--set parallel.tp=2 --set parallel.sequence_parallel=true) ;;
      *-ddp2) np=4 ;;
      *-zbh1-zero3x2) np=4; par+=(--set parallel.pipeline_schedule=zb-h1 --set parallel.data_parallel=zero3) ;;
      *-zero3x2) np=4; par+=(--set parallel.data_parallel=zero3) ;;
      *-tp2-zero2x2) np=8; par+=(--set parallel.tp=2 --set parallel.data_parallel=zero2) ;;
    esac
    "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${common[@]}" "${extra[@]}" "${par[@]}" \
      --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "$model $layout: run failed"; tail -3 "$out.log"; continue; }
    parity "$model $layout" "$ref/tiny_gpt" "$out/tiny_gpt"
  done
done

bad 2 "Mamba-2 layers' 4 heads (ssm_expand x width / ssm_head_dim) in 1 groups (model.ssm_groups) must both be divisible by parallel.tp 2" \
  "$cfg" "${common[@]}" "${hybrid[@]}" --set parallel.tp=2
bad 2 "whose state is not passed between context-parallel ranks" "$cfg" "${common[@]}" "${hybrid[@]}" \
  --set parallel.cp=2

# Muon under DDP, ZeRO-1/2/3 (matrices cut across the shards: each matrix's look-ahead gathered
# whole from the ranks' pieces, orthogonalised, each rank's piece applied), HSDP and PP x ZeRO-3:
# equal to 1 process. Refused under TP.
muon=("${common[@]}" --set 'optim.name="muon"')
"$loom" train "$cfg" "${muon[@]}" --set run.out_dir="$work/muon-np1" > "$work/muon-np1.log" 2>&1 ||
  fail "muon: single-process run failed"
for layout in ddp2 zero1x2 zero2x4 zero3x4 hsdp2x2 pp2-zero3x2; do
  out=$work/muon-$layout
  case $layout in
    ddp2) np=2; par=() ;;
    zero1x2) np=2; par=(--set parallel.data_parallel=zero1) ;;
    zero2x4) np=4; par=(--set parallel.data_parallel=zero2) ;;
    zero3x4) np=4; par=(--set parallel.data_parallel=zero3) ;;
    hsdp2x2) np=4; par=(--set parallel.data_parallel=zero3 --set parallel.dp_replicate=2) ;;
    pp2-zero3x2) np=4; par=(--set parallel.pp=2 --set parallel.data_parallel=zero3) ;;
  esac
  "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${muon[@]}" "${par[@]}" \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "muon $layout: run failed"; tail -3 "$out.log"; continue; }
  parity "muon $layout" "$work/muon-np1/tiny_gpt" "$out/tiny_gpt"
done
bad 2 "Muon runs under ddp, ZeRO-1/2/3 and HSDP (gathering each matrix's momentum), pp and cp, not yet tp" \
  "$cfg" "${muon[@]}" --set parallel.tp=2

# PP4 interleaved needs 8 stages: GPT-2 8 blocks deep.
deep=("${common[@]}" --set model.depth=8)
"$loom" train "$cfg" "${deep[@]}" --set run.out_dir="$work/deep-np1" > "$work/deep-np1.log" 2>&1 ||
  fail "8 blocks: single-process run failed"
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${deep[@]}" --set parallel.pp=4 \
  --set parallel.pipeline_schedule=interleaved --set parallel.pipeline_chunks=2 \
  --set run.out_dir="$work/deep-pp4-interleaved" > "$work/deep-pp4-interleaved.log" 2>&1 ||
  fail "8 blocks: pp4 interleaved failed"
parity "gpt2 (8 blocks) pp4-interleaved" "$work/deep-np1/tiny_gpt" "$work/deep-pp4-interleaved/tiny_gpt"

# DiT: the conditioning travels with the tokens between stages (and its gradient back).
dit=(--set train.steps=10 --set train.log_every=1 --set model.depth=4 --set model.heads=4
  --set train.batch_size=4 --set train.grad_accum=4 --set sample.per_class=1)
"$loom" train "$here/tiny_dit.toml" "${dit[@]}" --set run.out_dir="$work/dit-np1" > "$work/dit-np1.log" 2>&1 ||
  fail "dit: single-process run failed"
for layout in pp2-1f1b pp4-gpipe pp2-interleaved pp2-tp2-sp pp2-zero3x2; do
  out=$work/dit-$layout
  case $layout in
    pp2-1f1b) np=2; par=(--set parallel.pp=2) ;;
    pp4-gpipe) np=4; par=(--set parallel.pp=4 --set parallel.pipeline_schedule=gpipe) ;;
    pp2-interleaved) np=2; par=(--set parallel.pp=2 --set parallel.pipeline_schedule=interleaved
      --set parallel.pipeline_chunks=2) ;;
    pp2-tp2-sp) np=4; par=(--set parallel.pp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true) ;;
    pp2-zero3x2) np=4; par=(--set parallel.pp=2 --set parallel.data_parallel=zero3) ;;
  esac
  "$mpirun" --oversubscribe -np $np "$loom" train "$here/tiny_dit.toml" "${dit[@]}" "${par[@]}" \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "dit $layout: run failed"; tail -3 "$out.log"; continue; }
  parity "dit $layout" "$work/dit-np1/tiny_dit" "$out/tiny_dit"
done
grep -q "^samples: " "$work/dit-pp2-1f1b.log" || fail "dit pp2: no samples from the gathered EMA weights"

# Interleaved chunks with sequence splits: each chunk of a rank is a region of its own.
interleaved=(--set parallel.pp=2 --set parallel.pipeline_schedule=interleaved --set parallel.pipeline_chunks=2)
for combo in gpt-tp2-sp dit-cp2; do
  case $combo in
    gpt-tp2-sp) c=$cfg; args=("${common[@]}" --set parallel.tp=2 --set parallel.sequence_parallel=true); ref=$work/gpt2-np1/tiny_gpt ;;
    dit-cp2) c=$here/tiny_dit.toml; args=("${dit[@]}" --set parallel.cp=2); ref=$work/dit-np1/tiny_dit ;;
  esac
  out=$work/interleaved-$combo
  "$mpirun" --oversubscribe -np 4 "$loom" train "$c" "${args[@]}" "${interleaved[@]}" --set run.out_dir="$out" \
    > "$out.log" 2>&1 || { fail "pp2 interleaved x $combo: run failed"; tail -3 "$out.log"; continue; }
  parity "pp2 interleaved x $combo" "$ref" "$out/$(basename "$ref")"
done

# Evaluation through the pipeline, and the text sample from the gathered weights.
with_eval=("${common[@]}" --set eval.every=5 --set sample.tokens=8)
"$loom" train "$cfg" "${with_eval[@]}" --set run.out_dir="$work/eval-np1" > "$work/eval-np1.log" 2>&1 ||
  fail "gpt with eval: 1 process failed"
"$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${with_eval[@]}" --set parallel.pp=2 \
  --set run.out_dir="$work/eval-pp2" > "$work/eval-pp2.log" 2>&1 || fail "gpt with eval: pp2 failed"
a=$(grep -o "final held-out loss at step 10: [0-9.]*" "$work/eval-np1.log")
b=$(grep -o "final held-out loss at step 10: [0-9.]*" "$work/eval-pp2.log")
echo "1 process: $a; pp2: $b"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "held-out loss under pp2 '$b' is not the 1-process '$a'"
grep -q "^sample (8 tokens" "$work/eval-pp2.log" || fail "no text sample under pp2"

# Save under PP2 x TP2, resume under other layouts.
base=$work/reshard
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" --set train.stop_after=5 \
  --set parallel.pp=2 --set parallel.tp=2 --set run.out_dir="$base" > "$base.log" 2>&1 ||
  fail "reshard: first half failed"
for target in zero2x4 tp4; do
  out=$work/reshard-$target
  rm -rf "$out" && cp -r "$base" "$out"
  case $target in
    zero2x4) par=(--set parallel.data_parallel=zero2) ;;
    tp4) par=(--set parallel.tp=4) ;;
  esac
  "$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" "${par[@]}" --resume \
    --set run.out_dir="$out" > "$out.log" 2>&1 || fail "reshard to $target: second half failed"
  grep -q "resumed from .*step-000005 at step 5" "$out.log" || fail "reshard to $target: did not resume at step 5"
  parity "gpt2 pp2 x tp2 to step 5, then $target to 10," "$work/gpt2-np1/tiny_gpt" "$out/tiny_gpt"
done
# And into a pipeline: saved under ZeRO-3 on 4, resumed under PP2 x TP2 and PP4 1F1B.
base=$work/into-pp
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" --set train.stop_after=5 \
  --set parallel.data_parallel=zero3 --set run.out_dir="$base" > "$base.log" 2>&1 ||
  fail "into pp: first half failed"
for target in pp2-tp2 pp4-1f1b; do
  out=$work/into-$target
  rm -rf "$out" && cp -r "$base" "$out"
  case $target in
    pp2-tp2) par=(--set parallel.pp=2 --set parallel.tp=2) ;;
    pp4-1f1b) par=(--set parallel.pp=4 --set parallel.pipeline_schedule=1f1b) ;;
  esac
  "$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" "${par[@]}" --resume \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "into $target: second half failed"; continue; }
  grep -q "resumed from .*step-000005 at step 5" "$out.log" || fail "into $target: did not resume at step 5"
  parity "gpt2 zero3 x4 to step 5, then $target to 10," "$work/gpt2-np1/tiny_gpt" "$out/tiny_gpt"
done

# HSDP's replicas with each model-parallel axis (8 processes: 2 replicas x 2 ZeRO-3 shards x 2).
for axis in tp cp pp; do
  out=$work/hsdp-$axis
  "$mpirun" --oversubscribe -np 8 "$loom" train "$cfg" "${common[@]}" --set parallel.$axis=2 \
    --set parallel.dp_replicate=2 --set parallel.data_parallel=zero3 --set run.out_dir="$out" \
    > "$out.log" 2>&1 || { fail "hsdp x $axis: run failed"; continue; }
  grep -q "2 replicas x 2 shards: zero3" "$out.log" || fail "hsdp x $axis: not the layout asked for"
  parity "gpt2 2 replicas x 2 zero3 shards x $axis 2" "$work/gpt2-np1/tiny_gpt" "$out/tiny_gpt"
done

# Bad layouts: one clear error, non-zero exit, before any step.
bad 4 "parallel.pp 4 x pipeline_chunks 2 = 8 stages for model.depth 4 blocks" "$cfg" "${common[@]}" \
  --set parallel.pp=4 --set parallel.pipeline_schedule=interleaved --set parallel.pipeline_chunks=2
bad 2 "needs train.grad_accum (the micro-batches, 3) to be a multiple of parallel.pp 2" "$cfg" "${common[@]}" \
  --set parallel.pp=2 --set parallel.pipeline_schedule=interleaved --set parallel.pipeline_chunks=2 \
  --set train.grad_accum=3
bad 4 "parallel.pp 4 x pipeline_chunks 1 = 4 stages for model.depth 2 blocks" "$here/tiny_dit.toml" \
  --set model.depth=2 --set parallel.pp=4
bad 2 "parallel.pipeline_schedule 'zigzag' (expected gpipe, 1f1b, interleaved or zb-h1)" "$cfg" "${common[@]}" \
  --set parallel.pp=2 --set parallel.pipeline_schedule=zigzag

finish
