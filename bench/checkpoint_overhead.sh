#!/usr/bin/env bash
# What checkpointing costs the training loop: a GPT (width 256, depth 4, context 64, batch 8,
# byte vocabulary; 3.2M parameters, 39 MB of weights and AdamW moments per checkpoint), 210 steps
# on 1 process with 2 threads, a checkpoint every 50 steps written synchronously or in the
# background (train.async_checkpoint), against the same run without checkpoints -- all measured
# in this run. Time: the loop's wall time from step 10 to step 210 (metrics elapsed_s; the
# final checkpoint after the last step is not in it).
# Usage: bench/checkpoint_overhead.sh [LOOM_BINARY] [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
loom=${1:-$root/build/loom}
work=${2:-/tmp/loom_checkpoint_bench}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=2
cfg=(--set model.width=256 --set model.depth=4 --set model.heads=4 --set model.context=64
  --set train.batch_size=8 --set train.steps=210 --set train.log_every=10 --set eval.every=0
  --set sample.tokens=0 --set train.keep_checkpoints=2)
run() {  # name, extra settings...
  local name=$1; shift
  "$loom" train "$root/tests/e2e/tiny_gpt.toml" "${cfg[@]}" "$@" --set run.out_dir="$work/$name" \
    > "$work/$name.log"
}
for round in 1 2; do
  run none-$round --set train.ckpt_every=0
  run sync-$round --set train.ckpt_every=50
  run async-$round --set train.ckpt_every=50 --set train.async_checkpoint=true
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def loop_seconds(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}/tiny_gpt/metrics.jsonl")]
    at = {r["step"]: r["elapsed_s"] for r in rows}
    return at[210] - at[10]
for mode in ("none", "sync", "async"):
    t = [loop_seconds(f"{mode}-{r}") for r in (1, 2)]
    best = min(t)
    if mode == "none":
        base = best
    print(f"{mode:>5}: {best:6.2f} s for 200 steps ({1e3 * best / 200:.1f} ms/step; rounds "
          f"{t[0]:.2f}, {t[1]:.2f})" + ("" if mode == "none" else
          f"  overhead {100 * (best / base - 1):+.1f}% with a checkpoint every 50 steps"))
PY
