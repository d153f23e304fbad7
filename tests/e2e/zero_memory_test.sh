#!/usr/bin/env bash
# ZeRO-3 on 4 processes holds at most 0.3x the parameter + gradient + optimizer-state bytes of
# one process, per rank. The model: the tiny GPT made 48 blocks deep (width 32, byte vocabulary):
# ZeRO-3 keeps 1/4 of the state plus a window of two gathered blocks and two gradient buffers
# and the non-block parameters, so the ratio approaches 1/4 only as blocks get many.
# Each figure is the sum of the three categories' peaks over the run (peaks taken from the
# first step, after the model is built and sharded), from every rank's metrics file. ZeRO-2 is
# printed for comparison, not checked. Also: full activation checkpointing at least halves the
# activation peak of one process (it keeps the 48 blocks' inputs and one block's activations);
# selective checkpointing (keeping matmul and attention outputs) lies between it and none.
# Usage: zero_memory_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
common=(--set train.steps=4 --set train.log_every=1 --set model.depth=48 --set train.batch_size=8
  --set eval.every=0 --set sample.tokens=0)

"$loom" train "$here/tiny_gpt.toml" "${common[@]}" --set run.out_dir="$work/np1" > "$work/np1.log" 2>&1 ||
  { cat "$work/np1.log"; exit 1; }
"$loom" train "$here/tiny_gpt.toml" "${common[@]}" --set parallel.activation_checkpointing=full \
  --set run.out_dir="$work/np1-ac" > "$work/np1-ac.log" 2>&1 || { cat "$work/np1-ac.log"; exit 1; }
"$loom" train "$here/tiny_gpt.toml" "${common[@]}" --set parallel.activation_checkpointing=selective \
  --set run.out_dir="$work/np1-sac" > "$work/np1-sac.log" 2>&1 || { cat "$work/np1-sac.log"; exit 1; }
for strategy in zero2 zero3; do
  "$mpirun" --oversubscribe -np 4 "$loom" train "$here/tiny_gpt.toml" "${common[@]}" \
    --set parallel.data_parallel=$strategy --set run.out_dir="$work/$strategy" > "$work/$strategy.log" 2>&1 ||
    { cat "$work/$strategy.log"; exit 1; }
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]

def state_peak(run, rank):
    """Peak parameter + gradient + optimizer bytes of one rank, from its metrics file."""
    run_dir = f"{work}/{run}/tiny_gpt"
    path = f"{run_dir}/metrics.jsonl" if rank == 0 else f"{run_dir}/logs/metrics-rank-{rank}.jsonl"
    with open(path) as f:
        mem = [m for m in map(json.loads, f) if "mem" in m][-1]["mem"]
    return sum(mem[c]["peak"] for c in ("parameters", "gradients", "optimizer"))

one = state_peak("np1", 0)
worst = 0
for run in ("zero2", "zero3"):
    peaks = [state_peak(run, r) for r in range(4)]
    ratio = max(peaks) / one
    print(f"{run} x4: per-rank parameter+gradient+optimizer peak {max(peaks)} B of 1 process's "
          f"{one} B = {ratio:.3f}x (ranks: {', '.join(str(p) for p in peaks)})")
    if run == "zero3":
        worst = ratio
def activation_peak(run):
    with open(f"{work}/{run}/tiny_gpt/metrics.jsonl") as f:
        return [m for m in map(json.loads, f) if "mem" in m][-1]["mem"]["activations"]["peak"]
act, act_ckpt = activation_peak("np1"), activation_peak("np1-ac")
print(f"activation checkpointing (1 process): activation peak {act_ckpt} B of {act} B = "
      f"{act_ckpt / act:.3f}x")
if act_ckpt > 0.5 * act:
    sys.exit("FAIL: activation checkpointing does not halve the activation peak")
act_sel = activation_peak("np1-sac")
print(f"selective activation checkpointing (1 process): activation peak {act_sel} B = "
      f"{act_sel / act:.3f}x")
if not act_ckpt < act_sel < 0.9 * act:
    sys.exit("FAIL: selective checkpointing should keep less than 0.9x of the activations and "
             "more than full checkpointing")
if worst > 0.3:
    sys.exit(f"FAIL: zero3 ratio {worst:.3f} above 0.3")
print("PASS")
PY
