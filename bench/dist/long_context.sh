#!/usr/bin/env bash
# Long context on 8 processes: a Llama-style GPT (1 block, width 32, 2 heads, batch 1) at
# 32,768, 65,536, 131,072 and 262,144 tokens with ring context parallelism over cp 8 (each rank
# 1/8 of every activation; the attention kernels never hold an S x S matrix), then at 262,144
# tokens under USP (ring 4 x Ulysses 2) and under ring with full activation checkpointing.
# Prints each run's step time (its second step: the first pays the allocator's warm-up) and every
# rank's largest activation peak, and checks that the peak grows linearly in S / P (each ratio
# within 20% of the lengths'). train.precision is the default ("auto": bf16 where the CPU
# multiplies bf16 natively), so the ring runs in bf16 there. data.val_fraction 0.07: the
# held-out part holds one 262,144-token window for the final evaluation.
# Usage: bench/dist/long_context.sh [LOOM_BINARY] [WORK_DIR]   (about 30 minutes on 2 cores)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
loom=${1:-$root/build/loom}
work=${2:-/tmp/loom_long_context_bench}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg=(--set model.style=llama --set model.depth=1 --set model.width=32 --set model.heads=2
  --set train.batch_size=1 --set train.steps=2 --set train.log_every=1 --set eval.every=0
  --set sample.tokens=0 --set train.ckpt_every=0 --set data.val_fraction=0.07 --set parallel.cp=8)
run() {  # NAME TOKENS ARGS...
  local name=$1 tokens=$2; shift 2
  mpirun --oversubscribe -np 8 "$loom" train "$root/tests/e2e/tiny_gpt.toml" "${cfg[@]}" \
    --set model.context="$tokens" "$@" --set run.out_dir="$work/$name" > "$work/$name.log" 2>&1 ||
    { echo "FAIL: $name"; tail -3 "$work/$name.log"; exit 1; }
}
for S in 32768 65536 131072 262144; do run "ring-$S" "$S"; done
run usp-262144 262144 --set parallel.context_parallel=usp --set parallel.ulysses=2
run ring-ac-262144 262144 --set parallel.activation_checkpointing=full
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def figures(name):
    peak, step = 0, None
    for r in range(8):
        path = f"{work}/{name}/tiny_gpt/" + ("metrics.jsonl" if r == 0 else f"logs/metrics-rank-{r}.jsonl")
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        peak = max(peak, [m for m in lines if "mem" in m][-1]["mem"]["activations"]["peak"])
        if r == 0:
            step = [m for m in lines if "time_s" in m][-1]["time_s"]["step"]
    return peak, step
rows = {}
print("run              tokens  rows/rank  activation peak/rank  bytes/row  step (s)")
for name in ["ring-32768", "ring-65536", "ring-131072", "ring-262144", "usp-262144", "ring-ac-262144"]:
    S = int(name.rsplit("-", 1)[1])
    peak, step = figures(name)
    rows[name] = peak
    print(f"{name:15s} {S:7d} {S // 8:10d} {peak:21d} {peak / (S // 8):10.0f} {step:9.2f}")
base = rows["ring-32768"]
ok = all(abs(rows[f"ring-{S}"] / base / (S / 32768) - 1) < 0.2 for S in (65536, 131072, 262144))
print("activation peak linear in S/P within 20%:", "yes" if ok else "NO")
sys.exit(0 if ok else 1)
PY
