#!/usr/bin/env bash
# Data parallelism changes nothing but speed and memory: the tiny DiT and GPT configs (depth 2),
# 20 steps, on 1 process vs DDP (2 and 4 processes, and with gradient accumulation), ZeRO-1,
# ZeRO-2, ZeRO-3 and HSDP (2 replicas x 2 shards, over ZeRO-2 and ZeRO-3), all at the same
# global batch: the loss at every step, the final weights and the optimizer state agree to 1e-5
# relative (not bitwise: the ranks' gradients are summed in another order than the single
# process's batch reduction). ZeRO-3 gathering in bf16 stays within 1e-3 of the f32 losses.
# bf16 mixed precision with ZeRO-3 on 2 matches bf16 on 1 process (losses, 1e-4).
# Activation checkpointing (every block recomputed in backward, fully or all but its matmuls and
# attention) is bitwise equal on one process and, with ZeRO-3 on 2, equal to 1e-5.
# Resharding: a ZeRO-3 run on 4 processes stopped at step 10 and resumed on 1 process, by
# ZeRO-1 on 2 and by HSDP (2 x 4, ZeRO-3) on 8 ends where the uninterrupted 1-process run ends.
# Also: `loom ckpt export` read by an independent reader, damaged checkpoints refused with a
# clear error under mpirun, rank-0-only console, per-rank logs, `loom launch`, bad layouts.
# Usage: data_parallel_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for model in dit gpt; do
  cfg=$here/tiny_$model.toml
  # One run id for all: it is part of every checkpoint's bytes, which are compared.
  common=(--set train.steps=20 --set train.log_every=1 --set model.depth=2 --set train.batch_size=8
    --set run.id=cmp)
  [ $model = gpt ] && common+=(--set eval.every=0 --set sample.tokens=0)
  [ $model = dit ] && common+=(--set sample.per_class=1)
  "$loom" train "$cfg" "${common[@]}" --set run.out_dir="$work/$model-np1" > "$work/$model-np1.log" 2>&1 ||
    fail "$model: single-process run failed"
  run_dir=$work/$model-np1/tiny_$model
  # Activation checkpointing recomputes the same numbers (selective: keeps some of them):
  # bitwise on one process.
  for policy in full selective; do
    "$loom" train "$cfg" "${common[@]}" --set parallel.activation_checkpointing=$policy \
      --set run.out_dir="$work/$model-ac-$policy" > "$work/$model-ac-$policy.log" 2>&1 ||
      fail "$model: run with $policy checkpointing failed"
    for f in rank-00000.safetensors manifest.json; do
      cmp -s "$run_dir/step-000020/$f" "$work/$model-ac-$policy/tiny_$model/step-000020/$f" ||
        fail "$model: $policy activation checkpointing changed $f"
    done
  done
  for layout in np2 np4 np2-accum zero1-np2 zero2-np4 zero2-np2-accum zero3-np4 zero3-np2-accum \
    hsdp-np4 hsdp3-np4 bf16-np4 zero3ac-np2; do
    out=$work/$model-$layout
    extra=()
    rtol=1e-5
    case $layout in
      *np2*) np=2 ;;
      *np4*) np=4 ;;
    esac
    case $layout in
      zero1*) extra+=(--set parallel.data_parallel=zero1) ;;
      zero2*) extra+=(--set parallel.data_parallel=zero2) ;;
      zero3*) extra+=(--set parallel.data_parallel=zero3) ;;
      hsdp-*) extra+=(--set parallel.data_parallel=zero2 --set parallel.dp_replicate=2) ;;
      hsdp3*) extra+=(--set parallel.data_parallel=fsdp --set parallel.dp_replicate=2) ;;
      bf16*) extra+=(--set parallel.data_parallel=zero3 --set parallel.gather_dtype=bf16); rtol=1e-3 ;;
      zero3ac*) extra+=(--set parallel.data_parallel=zero3 --set parallel.activation_checkpointing=full) ;;
    esac
    case $layout in
      *accum) extra+=(--set train.batch_size=4 --set train.grad_accum=2) ;;
    esac
    "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${common[@]}" "${extra[@]}" \
      --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "$model $layout: run failed"; cat "$out.log"; continue; }
    echo -n "$model $layout vs 1 process: "
    if [ $layout = bf16-np4 ]; then  # weights rounded to bf16 in every forward: losses only
      /usr/bin/python3 "$here/compare_runs.py" "$run_dir" "$out/tiny_$model" $rtol --losses-only ||
        fail "$model $layout: losses not within $rtol of 1 process"
    else
      /usr/bin/python3 "$here/compare_runs.py" "$run_dir" "$out/tiny_$model" $rtol ||
        fail "$model $layout: not equal to 1 process"
    fi
  done
  # bf16 mixed precision under ZeRO-3 (parameters freed and re-gathered around each block,
  # their bf16 copies with them) against bf16 on one process: the losses agree.
  "$loom" train "$cfg" "${common[@]}" --set train.precision=bf16 \
    --set run.out_dir="$work/$model-amp-np1" > "$work/$model-amp-np1.log" 2>&1 ||
    fail "$model: bf16 single-process run failed"
  "$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" --set train.precision=bf16 \
    --set parallel.data_parallel=zero3 --set run.out_dir="$work/$model-amp-zero3" \
    > "$work/$model-amp-zero3.log" 2>&1 || fail "$model: bf16 ZeRO-3 run failed"
  echo -n "$model bf16 zero3-np2 vs bf16 1 process: "
  /usr/bin/python3 "$here/compare_runs.py" "$work/$model-amp-np1/tiny_$model" \
    "$work/$model-amp-zero3/tiny_$model" 1e-4 --losses-only || fail "$model bf16 zero3: losses differ"
  # Save under one layout (ZeRO-3 on 4), resume under others.
  base=$work/$model-reshard
  "$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" --set train.stop_after=10 \
    --set parallel.data_parallel=zero3 --set run.out_dir="$base" > "$base.log" 2>&1 ||
    fail "$model reshard: first half failed"
  for target in np1 zero1-np2 hsdp3-np8; do
    out=$work/$model-reshard-$target
    rm -rf "$out" && cp -r "$base" "$out"
    case $target in
      np1) launch=() ;;
      zero1-np2) launch=("$mpirun" --oversubscribe -np 2); extra=(--set parallel.data_parallel=zero1) ;;
      hsdp3-np8) launch=("$mpirun" --oversubscribe -np 8)
        extra=(--set parallel.data_parallel=zero3 --set parallel.dp_replicate=2) ;;
    esac
    [ $target = np1 ] && extra=()
    "${launch[@]}" "$loom" train "$cfg" "${common[@]}" "${extra[@]}" --resume \
      --set run.out_dir="$out" > "$out.log" 2>&1 || fail "$model reshard to $target: second half failed"
    grep -q "resumed from .*step-000010 at step 10" "$out.log" || fail "$model reshard to $target: did not resume at step 10"
    echo -n "$model zero3 x4 to step 10, then $target to 20, vs 1 process: "
    /usr/bin/python3 "$here/compare_runs.py" "$run_dir" "$out/tiny_$model" 1e-5 || fail "$model reshard to $target: differs"
  done
done

gpt_common=(--set train.steps=20 --set model.depth=2 --set train.batch_size=8 --set eval.every=0
  --set sample.tokens=0)

# One consolidated file from a 4-rank ZeRO-3 checkpoint, read by an independent safetensors
# reader, equals the sharded checkpoint's model (itself read independently, checksums checked).
ckpt=$work/gpt-reshard/tiny_gpt/step-000010
"$loom" ckpt export "$ckpt" "$work/export.safetensors" > "$work/export.log" 2>&1 || fail "ckpt export failed: $(cat "$work/export.log")"
/usr/bin/python3 "$here/check_export.py" "$ckpt" "$work/export.safetensors" ||
  fail "the exported file differs from the checkpoint"
"$loom" ckpt verify "$ckpt" > /dev/null 2>&1 || fail "ckpt verify refused an intact checkpoint"

# Damaged checkpoints: each refused with an error naming what is wrong, quickly, under mpirun.
# rehash FILE: manifest.xxh64 made to match an edited manifest, so the check behind it is reached.
rehash() { /usr/bin/python3 -c 'import sys, xxhash; print(xxhash.xxh64(open(sys.argv[1], "rb").read()).hexdigest())' "$1" > "$(dirname "$1")/manifest.xxh64"; }
for damage in missing checksum shape manifest; do
  out=$work/gpt-damaged-$damage
  rm -rf "$out" && cp -r "$work/gpt-reshard" "$out"
  c=$out/tiny_gpt/step-000010
  case $damage in
    missing) rm "$c/rank-00002.safetensors"; expect="file rank-00002.safetensors" ;;
    checksum) printf '\x01' | dd of="$c/rank-00001.safetensors" bs=1 seek=$(( $(stat -c %s "$c/rank-00001.safetensors") - 2 )) conv=notrunc 2>/dev/null
      expect="checksum mismatch in rank-00001.safetensors" ;;
    shape) sed -i '0,/"shape": \[/s//"shape": [2, /' "$c/manifest.json"; rehash "$c/manifest.json"
      expect="do not tile\|cover" ;;
    manifest) sed -i '0,/"shape": \[/s//"shape": [2, /' "$c/manifest.json"
      expect="manifest.json does not match its checksum" ;;
  esac
  start=$SECONDS
  "$mpirun" --oversubscribe -np 2 "$loom" train "$here/tiny_gpt.toml" "${gpt_common[@]}" --resume \
    --set run.out_dir="$out" > "$out.log" 2>&1 && fail "a checkpoint with a $damage problem was accepted"
  grep -q "$expect" "$out.log" || fail "no clear error for a $damage problem: $(grep -m3 error "$out.log")"
  [ $((SECONDS - start)) -lt 60 ] || fail "the $damage error took $((SECONDS - start))s"
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

# Under loom launch an error that every rank meets is printed once, without OpenMPI's banner or
# C++ source, then the launcher's one line; its full text (with the check) is in the rank log.
"$loom" launch -n 2 -- train "$here/tiny_dit.toml" --set run.out_dir="$work/launch-bad" \
  --set train.stepz=3 > "$work/launch-bad.out" 2> "$work/launch-bad.err" && fail "launch: a bad key was accepted"
[ "$(grep -c 'loom: error' "$work/launch-bad.err")" = 1 ] &&
  grep -qE "^launch: the job failed with exit status 1; the error above is rank [01]'s( \(1 more rank printed the same\))?$" "$work/launch-bad.err" &&
  [ "$(wc -l < "$work/launch-bad.err")" = 3 ] && ! grep -qE 'MPI_ABORT|\.cpp:[0-9]' "$work/launch-bad.err" "$work/launch-bad.out" ||
  fail "launch: the error is not printed once: $(cat "$work/launch-bad.err" "$work/launch-bad.out")"
# An error after the rank logs started (no dataset there): once on the console, in full (with
# the failed check) in the rank logs.
"$loom" launch -n 2 -- train "$here/tiny_dit.toml" --set run.out_dir="$work/launch-bad" \
  --set data.path=/nonexistent > "$work/launch-bad2.out" 2> "$work/launch-bad2.err" && fail "launch: a missing dataset was accepted"
[ "$(grep -c 'loom: error' "$work/launch-bad2.err")" = 1 ] && ! grep -qE 'MPI_ABORT|\.cpp:[0-9]' "$work/launch-bad2.err" "$work/launch-bad2.out" ||
  fail "launch: a data error is not printed once: $(cat "$work/launch-bad2.err" "$work/launch-bad2.out")"
# (The first rank's abort may end the other before it writes: one log at least.)
grep -q "^loom: error: IDX file /nonexistent.* at .*idx\.cpp:[0-9]*\]$" "$work"/launch-bad/tiny_dit/logs/rank-*.log ||
  fail "no rank log has the error in full: $(tail -q -n2 "$work"/launch-bad/tiny_dit/logs/rank-*.log)"

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
