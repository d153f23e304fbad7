#!/usr/bin/env bash
# In-memory checkpoints (resilience.memory_checkpoint_every) against disk checkpoints, on a GPT
# of 10.7M parameters (width 384, depth 6, context 64, byte vocabulary): 128 MB of weights and
# AdamW moments per rank, 2 processes (DDP, 1 thread each), a batch of 32 x 64 tokens; the
# copies in /dev/shm; all measured in this run.
#  - restore: a run killed at step 15 holds step 10 both on disk and in memory; it is restarted
#    (--resume auto, one step) from memory, from disk with the files in the page cache, and
#    from disk after the page cache is dropped (as root; a restart on another machine reads
#    cold), alternating, 3 rounds each. Time: what the trainer reports ("restored in").
#  - overhead: 60 steps with an in-memory copy every 10 steps, and without, alternating, 2
#    rounds each; time from step 10 to 60 (metrics elapsed_s), and what the trainer reports the
#    steps waited for the copies.
# Usage: bench/memory_checkpoint.sh [LOOM_BINARY] [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
loom=${1:-$root/build/loom}
work=${2:-/tmp/loom_memory_checkpoint_bench}
rm -rf "$work" && mkdir -p "$work"
store=/dev/shm/loom_memory_checkpoint_bench.$$  # the copies in memory, as in a real run
trap 'rm -rf "$store" "$store.saved"' EXIT
export OMP_NUM_THREADS=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg=(--set run.id=bench --set model.width=384 --set model.depth=6 --set model.heads=6
  --set model.context=64 --set train.batch_size=32 --set train.log_every=10 --set eval.every=0
  --set sample.tokens=0 --set parallel.data_parallel=\"ddp\"
  --set resilience.memory_store="\"$store\"")
train() {  # run dir, log, extra...
  local dir=$1 log=$2; shift 2
  "$loom" launch -n 2 -- train "$root/tests/e2e/tiny_gpt.toml" "${cfg[@]}" \
    --set run.out_dir="$dir" "$@" >> "$log" 2>&1
}

# --- restore ---
LOOM_FAULT="kill:rank=1,step=15" train "$work/run" "$work/crash.log" --set train.steps=30 \
  --set train.ckpt_every=10 --set resilience.memory_checkpoint_every=10 || true
ls "$work/run/tiny_gpt/step-000010" > /dev/null
cp -a "$work/run" "$work/run.saved" && cp -a "$store" "$store.saved"
restore() {  # memory | disk | cold
  rm -rf "$work/run" "$store" && cp -a "$work/run.saved" "$work/run"
  [ "$1" = memory ] && cp -a "$store.saved" "$store"
  [ "$1" = cold ] && { sync; echo 1 > /proc/sys/vm/drop_caches; }
  train "$work/run" "$work/restore-$1.log" --set train.steps=30 --set train.ckpt_every=10 \
    --set resilience.memory_checkpoint_every=10 --set train.stop_after=11 --resume auto
}
cold=cold
(echo 1 > /proc/sys/vm/drop_caches) 2> /dev/null || cold=""
for round in 1 2 3; do
  for how in memory disk $cold; do restore $how; done
done

# --- overhead ---
for round in 1 2; do
  train "$work/none-$round" "$work/none.log" --set train.steps=60
  train "$work/mem-$round" "$work/mem.log" --set train.steps=60 \
    --set resilience.memory_checkpoint_every=10
done

/usr/bin/python3 - "$work" <<'PY'
import glob, json, re, statistics, sys
work = sys.argv[1]
def restored(how):
    text = open(f"{work}/restore-{how}.log").read()
    found = re.findall(r"resumed from (\S+) at step 10 \(restored in ([0-9.]+) s\)", text)
    assert found and all((f == "memory") == (how == "memory") for f, _ in found), f"{how}: {found}"
    return [float(s) for _, s in found]
times = {how: restored(how) for how in ("memory", "disk", "cold")
         if glob.glob(f"{work}/restore-{how}.log")}
mem = statistics.median(times["memory"])
for how, t in times.items():
    med = statistics.median(t)
    print(f"restore from {how:>6}: median {1e3 * med:7.1f} ms (rounds "
          + ", ".join(f"{1e3 * x:.1f}" for x in t) + ")"
          + ("" if how == "memory" else f"  memory is {med / mem:.1f}x faster"))
def loop_seconds(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}/tiny_gpt/metrics.jsonl")]
    at = {r["step"]: r["elapsed_s"] for r in rows if "elapsed_s" in r}
    return at[60] - at[10]
none = min(loop_seconds(f"none-{r}") for r in (1, 2))
memv = min(loop_seconds(f"mem-{r}") for r in (1, 2))
print(f"50 steps: {none:.2f} s without copies, {memv:.2f} s with a copy every 10 steps: "
      f"overhead {100 * (memv / none - 1):+.1f}% (best of 2 each)")
for line in open(f"{work}/mem.log"):
    if line.startswith("in-memory checkpoints:"):
        print("trainer:", line.strip())
PY
