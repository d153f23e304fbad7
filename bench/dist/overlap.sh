#!/usr/bin/env bash
# Overlap benchmark: where a data-parallel step's time goes -- compute, communication the step
# waited for (exposed), and idle (waiting for data) -- for DDP and ZeRO-3 on 2 and 4 processes,
# with one process at the same global batch as the reference, all measured in this run.
# A GPT (width 128, depth 4, context 64, byte vocabulary), global batch 16, 14 steps (the first
# 4 not counted). Every rank logs its split per step (metrics time_s); the report takes each
# rank's median step and averages the ranks.
# On a 2-core machine 4 processes share the cores: their "compute" includes time descheduled.
# Usage: bench/dist/overlap.sh [LOOM_BINARY] [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
loom=${1:-$root/build/loom}
work=${2:-/tmp/loom_overlap_bench}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg=(--set model.width=128 --set model.depth=4 --set model.heads=4 --set model.context=64
  --set train.batch_size=16 --set train.steps=14 --set train.log_every=1 --set eval.every=0
  --set sample.tokens=0 --set train.ckpt_every=0)

runs=()
"$loom" train "$root/tests/e2e/tiny_gpt.toml" "${cfg[@]}" --set run.out_dir="$work/np1" > "$work/np1.log"
runs+=("1 process=$work/np1/tiny_gpt")
for strategy in ddp zero3; do
  for np in 2 4; do
    out=$work/$strategy-np$np
    # 0.5 MB buckets: about 6 for this 3.3 MB model, so the first all-reduces start while
    # backward is still running (the default 25 MB would make one bucket, sent at the end).
    mpirun --oversubscribe -np $np "$loom" train "$root/tests/e2e/tiny_gpt.toml" "${cfg[@]}" \
      --set parallel.data_parallel=$strategy --set parallel.bucket_mb=0.5 \
      --set run.out_dir="$out" > "$out.log"
    runs+=("$strategy x$np=$out/tiny_gpt")
  done
done
/usr/bin/python3 "$here/overlap_report.py" 4 "${runs[@]}"
