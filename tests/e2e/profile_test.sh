#!/usr/bin/env bash
# The profiler on a 2-rank ZeRO-3 run of the tiny GPT: `--profile steps=3:4` writes a trace per
# rank and a merged one, which check_trace.py parses and checks (every rank present, collectives
# on their own tracks with byte counts, no partly overlapping events on a track, timestamps in
# order). A bad window is refused before any work.
# Usage: profile_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
"$mpirun" --oversubscribe -np 2 "$loom" train "$here/tiny_gpt.toml" --set run.out_dir="$work" \
  --set eval.every=0 --set sample.tokens=0 --set parallel.data_parallel=\"zero3\" \
  --set train.steps=6 --profile steps=3:4 > "$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
for f in rank0.json rank1.json trace.json; do
  [ -s "$work/tiny_gpt/trace/$f" ] || { echo "FAIL: no trace/$f"; cat "$work/run.log"; exit 1; }
done
python3 "$here/check_trace.py" "$work/tiny_gpt/trace/trace.json" 2 || exit 1
out=$(python3 "$here/check_trace.py" "$work/tiny_gpt/trace/rank1.json" 1 2>&1) &&
  { echo "FAIL: rank 1's own trace passed as rank 0"; exit 1; }
grep -q "rank 0 is missing" <<< "$out" || { echo "FAIL: rank1.json rejected for another reason: $out"; exit 1; }
out=$("$loom" train "$here/tiny_gpt.toml" --set run.out_dir="$work/bad" --profile steps=4:2 2>&1) &&
  { echo "FAIL: --profile steps=4:2 was accepted"; exit 1; }
grep -q "expected A:B with 1 <= A <= B" <<< "$out" || { echo "FAIL: unclear error: $out"; exit 1; }
out=$("$loom" train "$here/tiny_gpt.toml" --set run.out_dir="$work/bad" --profile steps=5:9 2>&1) &&
  { echo "FAIL: a window past train.steps was accepted"; exit 1; }
grep -q "ends after the last step" <<< "$out" || { echo "FAIL: unclear error: $out"; exit 1; }
echo PASS
