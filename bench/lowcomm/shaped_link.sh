#!/usr/bin/env bash
# Wall-clock over a slow link: 4 workers in network namespaces of their own, joined by links
# shaped to RATE and DELAY each way (netem, or tbf and build/loom_delay_line where the kernel
# has no netem), MPI over TCP between them (tests/e2e/lowcomm/netns_rig.sh). The GPT of
# configs/gpt_kjv.toml with a 128-byte context and a global batch of 16: DDP for STEPS steps,
# then DiLoCo (H = 50, plain averaging, f32 and int4) and Streaming DiLoCo (FRAGMENTS fragments,
# default 2, each exchange overlapped with OVERLAP inner steps, default 20, mixing 0.5) for
# 4 x STEPS steps. Prints the time each took to reach DDP's final held-out loss (64 windows,
# every 50 steps), the bytes and seconds of a step or outer step, and the share of the run the
# training loop spent blocked on outer exchanges (between them DiLoCo's workers exchange
# nothing: tests/e2e/diloco_test.sh). KEEP=1 keeps the runs already in WORK (default
# /tmp/loom-shaped-link) and runs only the missing ones.
# Usage (as root): bench/lowcomm/shaped_link.sh [STEPS [RATE [DELAY]]]   (300, 100mbit, 20ms)
set -euo pipefail
steps=${1:-300} rate=${2:-100mbit} delay=${3:-20ms}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${WORK:-/tmp/loom-shaped-link}
[ "${KEEP:-0}" = 1 ] || rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE LOOM_FAULT= OMPI_ALLOW_RUN_AS_ROOT=1 \
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/tests/e2e/lowcomm/netns_rig.sh"
rig_check > /dev/null
RIG_DELAY_LINE=$root/build/loom_delay_line
rig_up 4 "$rate" "$delay"
echo "link: $RIG_SHAPE; gpt_kjv, 16 x 128 tokens a step, 4 processes of one thread;" \
  "streaming: ${FRAGMENTS:-2} fragments, overlap ${OVERLAP:-20} steps"
common=(--set train.batch_size=16 --set model.context=128 --set train.log_every=10
  --set train.ckpt_every=0 --set train.max_minutes=0 --set eval.every=50 --set eval.windows=64
  --set sample.tokens=0 --set optim.warmup_steps=50)
run() {  # NAME STEPS ARGS...
  local name=$1 n=$2
  shift 2
  [ -f "$work/$name/gpt_kjv/eval.json" ] && return
  rig_mpirun "$root/build/loom" train "$root/configs/gpt_kjv.toml" "${common[@]}" \
    --set train.steps="$n" --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1
}
run ddp "$steps"
target=$(/usr/bin/python3 -c "import json
print([json.loads(l) for l in open('$work/ddp/gpt_kjv/metrics.jsonl') if '\"val\"' in l][-1]['val']['nats_per_token'])")
diloco=(--set lowcomm.method=diloco --set lowcomm.workers=4 --set lowcomm.inner_steps=50
  --set lowcomm.outer_lr=1.0 --set lowcomm.outer_momentum=0)
streaming=(--set lowcomm.fragments=${FRAGMENTS:-2} --set lowcomm.overlap_steps=${OVERLAP:-20}
  --set lowcomm.mixing=0.5)
for c in none int4; do
  run diloco-$c $((4 * steps)) "${diloco[@]}" --set lowcomm.compression=$c
  run streaming-$c $((4 * steps)) "${diloco[@]}" "${streaming[@]}" --set lowcomm.compression=$c
done
# The delay line shares the 2 cores with the ranks: what it took.
[ -n "${RIG_DELAY_PID:-}" ] && echo "delay line: $(ps -o cputime= -p "$RIG_DELAY_PID") of CPU time"
rig_down
/usr/bin/python3 - "$work" "$target" <<'PY'
import json, sys
work, target = sys.argv[1], float(sys.argv[2])
def report(name):
    lines = [json.loads(l) for l in open(f"{work}/{name}/gpt_kjv/metrics.jsonl")]
    reached = next((m for m in lines if "val" in m and m["val"]["nats_per_token"] <= target), None)
    outer = [m["outer"] for m in lines if "outer" in m]
    steps = [m for m in lines if "outer" not in m and m["step"] > 1]
    step_s = sorted(m["time_s"]["step"] for m in steps)[len(steps) // 2]
    total = lines[-1]["elapsed_s"]
    blocked = sum(o["seconds"] for o in outer)
    return reached, outer, step_s, total, blocked, lines[-1]
ddp = report("ddp")
print(f"target: DDP's held-out loss after its last step, {target:.4f} nats/byte")
for name in ["ddp", "diloco-none", "diloco-int4", "streaming-none", "streaming-int4"]:
    reached, outer, step_s, total, blocked, last = report(name)
    t = f"{reached['elapsed_s']:.0f} s (step {reached['step']})" if reached else f"not reached in {last['step']} steps"
    ratio = f", {reached['elapsed_s'] / ddp[0]['elapsed_s']:.2f}x DDP's" if reached and ddp[0] else ""
    line = f"{name:<12} reached the target at {t}{ratio}; median step {step_s * 1e3:.0f} ms"
    if outer:
        mb = sum(o["sent_mb"] for o in outer) / len(outer)
        sec = sum(o["seconds"] for o in outer) / len(outer)
        line += (f"; an exchange {mb:.2f} MB, blocked {sec:.2f} s; blocked {blocked / total:.1%}"
                 f" of the run")
    else:
        line += f"; {last['sent_mb'] / last['step']:.2f} MB sent a step"
    print(line)
PY
