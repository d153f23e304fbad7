#!/usr/bin/env bash
# Data parallelism changes nothing but speed and memory: the tiny DiT and GPT configs (depth 2),
# 20 steps, on 1 process vs DDP (2 and 4 processes, and with gradient accumulation), ZeRO-1,
# ZeRO-2 and HSDP (2 replicas x 2 shards), all at the same global batch: the loss at every step,
# the final weights and the optimizer state agree to 1e-5 relative (not bitwise: the ranks'
# gradients are summed in another order than the single process's batch reduction).
# Resharding: a ZeRO-2 run on 4 processes stopped at step 10 and resumed by DDP on 2 processes
# ends where the uninterrupted 1-process run ends.
# Also: rank-0-only console, per-rank logs, `loom launch`, bad layouts.
# Usage: ddp_parity_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for model in dit gpt; do
  cfg=$here/tiny_$model.toml
  common=(--set train.steps=20 --set train.log_every=1 --set model.depth=2 --set train.batch_size=8)
  [ $model = gpt ] && common+=(--set eval.every=0 --set sample.tokens=0)
  [ $model = dit ] && common+=(--set sample.per_class=1)
  "$loom" train "$cfg" "${common[@]}" --set run.out_dir="$work/$model-np1" > "$work/$model-np1.log" 2>&1 ||
    fail "$model: single-process run failed"
  run_dir=$work/$model-np1/tiny_$model
  for layout in np2 np4 np2-accum zero1-np2 zero2-np4 zero2-np2-accum hsdp-np4; do
    out=$work/$model-$layout
    extra=()
    case $layout in
      *np2*) np=2 ;;
      *np4*) np=4 ;;
    esac
    case $layout in
      zero1*) extra+=(--set parallel.data_parallel=zero1) ;;
      zero2*) extra+=(--set parallel.data_parallel=zero2) ;;
      hsdp*) extra+=(--set parallel.data_parallel=zero2 --set parallel.dp_replicate=2) ;;
    esac
    case $layout in
      *accum) extra+=(--set train.batch_size=4 --set train.grad_accum=2) ;;
    esac
    "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${common[@]}" "${extra[@]}" \
      --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "$model $layout: run failed"; cat "$out.log"; continue; }
    echo -n "$model $layout vs 1 process: "
    /usr/bin/python3 "$here/compare_runs.py" "$run_dir" "$out/tiny_$model" 1e-5 || fail "$model $layout: not equal to 1 process"
  done
  # Save under one layout, resume under another.
  out=$work/$model-reshard
  "$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" --set train.stop_after=10 \
    --set parallel.data_parallel=zero2 --set run.out_dir="$out" > "$out-a.log" 2>&1 || fail "$model reshard: first half failed"
  "$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" --resume \
    --set run.out_dir="$out" > "$out-b.log" 2>&1 || fail "$model reshard: second half failed"
  grep -q "resumed from .*step-000010 at step 10" "$out-b.log" || fail "$model reshard: did not resume at step 10"
  echo -n "$model zero2 x4 to step 10, then ddp x2 to 20, vs 1 process: "
  /usr/bin/python3 "$here/compare_runs.py" "$run_dir" "$out/tiny_$model" 1e-5 || fail "$model reshard: differs"
done

# Console from rank 0 only; every rank has its log.
n=$(grep -c "^step " "$work/dit-np4.log")
[ "$n" = 20 ] || fail "console of a 4-process run shows $n progress lines (expected 20, rank 0's)"
for r in 0 1 2 3; do
  [ -s "$work/dit-np4/tiny_dit/logs/rank-$r.log" ] || fail "no log of rank $r"
done
grep -q "^step     20/20" "$work/dit-np4/tiny_dit/logs/rank-3.log" || fail "rank 3's log lacks its progress"

# loom launch runs the same job through mpirun.
"$loom" launch -n 2 -- train "$here/tiny_dit.toml" --set train.steps=20 --set train.log_every=1 \
  --set model.depth=2 --set train.batch_size=8 --set sample.per_class=1 \
  --set run.out_dir="$work/dit-launch" > "$work/dit-launch.log" 2>&1 || fail "loom launch failed"
echo -n "dit via loom launch -n 2 vs 1 process: "
/usr/bin/python3 "$here/compare_runs.py" "$work/dit-np1/tiny_dit" "$work/dit-launch/tiny_dit" 1e-5 ||
  fail "loom launch run differs"

# A global batch that does not split over the ranks: one clear error, non-zero exit, no hang.
start=$SECONDS
"$mpirun" --oversubscribe -np 3 "$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/bad" \
  > "$work/bad.log" 2>&1 && fail "batch 8 over 3 ranks was accepted"
grep -q "train.batch_size 8 (the global batch) does not split evenly over 3 data-parallel ranks" \
  "$work/bad.log" || fail "no clear error for an uneven batch: $(cat "$work/bad.log")"
[ $((SECONDS - start)) -lt 60 ] || fail "the uneven-batch error took $((SECONDS - start))s"
# A mesh that does not match the world.
"$mpirun" --oversubscribe -np 2 "$loom" train "$here/tiny_dit.toml" --set parallel.dp_shard=4 \
  --set run.out_dir="$work/bad" > "$work/bad2.log" 2>&1 && fail "dp_shard 4 on 2 ranks was accepted"
grep -q "multiply to 4 but the world has 2 processes" "$work/bad2.log" ||
  fail "no clear error for a mesh of the wrong size: $(cat "$work/bad2.log")"

[ $failures -eq 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
