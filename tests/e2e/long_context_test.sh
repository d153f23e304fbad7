#!/usr/bin/env bash
# Long context: a GPT (Llama style, 1 block, width 32, 2 heads) with sequences of 32768 tokens
# trains on 4 processes with ring context parallelism (each holds 8192 rows of every
# activation; ring attention keeps no score matrix), within a per-process memory limit of
# 150 MB that the same run on 1 process exceeds (a clear error). Also reports each rank's
# activation peak against the sequence length (CP=4 at 8192, 16384 and 32768 tokens) and
# checks that it grows linearly in S/P (ratios within 20% of the lengths').
# Usage: long_context_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/parallel_lib.sh"
common=(--set model.style=llama --set model.depth=1 --set model.width=32 --set model.heads=2
  --set train.batch_size=1 --set train.steps=2 --set train.log_every=1 --set eval.every=0
  --set sample.tokens=0 --set run.memory_limit_mb=150 --set train.ckpt_every=0 --set data.val_fraction=0.01)

for S in 8192 16384 32768; do
  "$mpirun" --oversubscribe -np 4 "$loom" train "$here/tiny_gpt.toml" "${common[@]}" --set model.context=$S \
    --set parallel.cp=4 --set run.out_dir="$work/cp4-$S" > "$work/cp4-$S.log" 2>&1 ||
    { fail "cp4 at $S tokens failed"; grep -m3 error "$work/cp4-$S.log"; }
done
"$loom" train "$here/tiny_gpt.toml" "${common[@]}" --set model.context=32768 \
  --set run.out_dir="$work/np1-32768" > "$work/np1-32768.log" 2>&1 && fail "1 process at 32768 tokens fit in 150 MB"
grep -q "memory limit of 150 MB exceeded" "$work/np1-32768.log" ||
  fail "no clear memory-limit error on 1 process: $(grep -m2 error "$work/np1-32768.log")"

/usr/bin/python3 - "$work" <<'PY' || fail "activation peak not linear in S/P"
import json, sys
work = sys.argv[1]
def peak(S):
    worst = 0
    for r in range(4):
        path = f"{work}/cp4-{S}/tiny_gpt/" + ("metrics.jsonl" if r == 0 else f"logs/metrics-rank-{r}.jsonl")
        with open(path) as f:
            mem = [m for m in map(json.loads, f) if "mem" in m][-1]["mem"]
        worst = max(worst, mem["activations"]["peak"])
    return worst
peaks = {S: peak(S) for S in (8192, 16384, 32768)}
print("sequence  rows/rank  activation peak per rank  per row")
for S, p in peaks.items():
    print(f"{S:8d}  {S // 4:9d}  {p:24d}  {p / (S // 4):7.0f}")
ok = all(abs(peaks[S] / peaks[8192] / (S / 8192) - 1) < 0.2 for S in peaks)
sys.exit(0 if ok else 1)
PY

finish
