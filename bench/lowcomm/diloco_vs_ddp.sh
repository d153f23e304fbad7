#!/usr/bin/env bash
# DiLoCo against data parallelism on the GPT of configs/gpt_kjv.toml (KJV bytes): 4 processes,
# the same global batch, steps and tokens; DDP (gradients all-reduced every step) against
# DiLoCo with 4 workers of one process, inner_steps H, f32 / int8 / int4 pseudo-gradients.
# Prints, per run, the held-out loss over the whole held-out text and the bytes rank 0 sent
# (every rank sends as much), and the ratios against DDP.
# Usage: bench/lowcomm/diloco_vs_ddp.sh [STEPS [H [OUTER_LR [OUTER_MOMENTUM]]]]
#        (defaults 1000, 50 and the paper's outer SGD: lr 0.7, Nesterov momentum 0.9);
#        BATCH (global batch, default 16) and LR (inner AdamW peak, default the config's 3e-3)
#        from the environment; COMPRESSIONS picks the DiLoCo runs (default "none int8 int4"),
#        KEEP=1 keeps the runs already in WORK (default /tmp/loom-diloco-bench) and runs only
#        the missing ones (a DDP run serves every DiLoCo setting of the same STEPS).
set -euo pipefail
steps=${1:-1000} H=${2:-50} outer_lr=${3:-0.7} outer_momentum=${4:-0.9}
root=$(cd "$(dirname "$0")/../.." && pwd)
loom=$root/build/loom
work=${WORK:-/tmp/loom-diloco-bench}
[ "${KEEP:-0}" = 1 ] || rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--set train.steps=$steps --set train.batch_size=${BATCH:-16} --set model.context=128
  --set optim.lr=${LR:-3e-3}
  --set train.log_every=50 --set train.ckpt_every=0 --set train.max_minutes=0 --set eval.every=0
  --set sample.tokens=0 --set optim.warmup_steps=50)
run() {  # NAME ARGS...
  local name=$1
  shift
  [ -f "$work/$name/gpt_kjv/eval.json" ] && return
  /usr/bin/time -f %e -o "$work/$name.wall" mpirun --oversubscribe -np 4 "$loom" train \
    "$root/configs/gpt_kjv.toml" "${common[@]}" --set run.out_dir="$work/$name" "$@" \
    > "$work/$name.log" 2>&1
}
run ddp
for c in ${COMPRESSIONS:-none int8 int4}; do
  run diloco-$c --set lowcomm.method=diloco --set lowcomm.workers=4 --set lowcomm.inner_steps=$H \
    --set lowcomm.compression=$c --set lowcomm.outer_lr=$outer_lr \
    --set lowcomm.outer_momentum=$outer_momentum
done
echo "gpt_kjv (0.92M parameters), $steps steps of ${BATCH:-16} x 128 tokens on 4 processes; DiLoCo: 4 workers," \
  "H $H, outer lr $outer_lr, momentum $outer_momentum"
/usr/bin/python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
def result(name):
    run = os.path.join(work, name, "gpt_kjv")
    ev = json.load(open(os.path.join(run, "eval.json")))
    last = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))][-1]
    wall = float(open(os.path.join(work, name + ".wall")).read())
    return ev["nats_per_token"], last["sent_mb"], wall
ddp = result("ddp")
print(f"{'run':<14}{'held-out loss':>14}{'vs DDP':>9}{'MB sent':>11}{'fewer bytes':>13}{'wall s':>9}")
for name in ["ddp", "diloco-none", "diloco-int8", "diloco-int4"]:
    if not os.path.exists(os.path.join(work, name, "gpt_kjv", "eval.json")):
        continue
    loss, mb, wall = result(name)
    print(f"{name:<14}{loss:>14.4f}{loss / ddp[0] - 1:>+9.2%}{mb:>11.2f}{ddp[1] / mb:>12.0f}x{wall:>9.0f}")
PY
