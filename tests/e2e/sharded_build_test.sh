#!/usr/bin/env bash
# A model larger than one process: a GPT whose parameters + AdamW state (16 bytes a parameter)
# are about 4x run.memory_limit_mb trains on 8 processes under ZeRO-3, each process building
# only its shards (no process ever holds the whole model). Checked:
#   - one process alone is refused before it allocates anything, naming the sizes;
#   - the 8-process run trains under the limit (the host allocator refuses any allocation past
#     it, from the command's start: the build is covered);
#   - every rank's peak (the sum of its category peaks over the whole run, the build included;
#     "other", the data and evaluation's buffers, printed apart) is at most 1.2 x (model state
#     / 8 + its activation peak + two gathered blocks), with the
#     model state and the block size computed here from the architecture (GPT-2 style, tied
#     embeddings), not taken from the trainer.
# Usage: sharded_build_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
V=256 C=256 T=32 L=32 limit=96
model=(--set model.vocab_size=$V --set model.width=$C --set model.heads=4 --set model.depth=$L
  --set model.context=$T --set train.steps=3 --set train.batch_size=8 --set train.log_every=1
  --set eval.every=0 --set sample.tokens=0 --set train.ckpt_every=0 --set run.memory_limit_mb=$limit)

if "$loom" train "$here/tiny_gpt.toml" "${model[@]}" --set run.out_dir="$work/np1" > "$work/np1.log" 2>&1; then
  echo "FAIL: one process trained a model 4x its memory limit"; exit 1
fi
grep -q "cannot fit.*on each process as f32 weights, gradients and AdamW moments (1 process)" "$work/np1.log" ||
  { echo "FAIL: one process was not refused with the sizes:"; cat "$work/np1.log"; exit 1; }
[ ! -e "$work/np1/tiny_gpt/metrics.jsonl" ] || { echo "FAIL: the refused run started"; exit 1; }
echo "ok: one process refused: $(head -c 200 "$work/np1.log")"

"$mpirun" --oversubscribe -np 8 "$loom" train "$here/tiny_gpt.toml" "${model[@]}" \
  --set parallel.data_parallel=zero3 --set run.out_dir="$work/zero3" > "$work/zero3.log" 2>&1 ||
  { echo "FAIL: ZeRO-3 on 8 processes did not train:"; tail -20 "$work/zero3.log"; exit 1; }

/usr/bin/python3 - "$work" $V $C $T $L $limit <<'PY'
import json, sys
work, V, C, T, L, limit = sys.argv[1], *map(int, sys.argv[2:])
block = 12 * C * C + 13 * C                  # qkv, proj, fc1, fc2 with biases, two LayerNorms
params = L * block + V * C + T * C + 2 * C   # + token and position embeddings, final norm
state = 16 * params                          # f32 weights and gradients, two AdamW moments
print(f"model: {params} parameters, state {state / 2**20:.1f} MB = {state / (limit * 2**20):.2f}x "
      f"run.memory_limit_mb {limit}; one block {4 * block / 2**20:.2f} MB")
if state < 4 * limit * 2**20:
    sys.exit("FAIL: the model's state is not 4x the limit")
worst = 0
for rank in range(8):
    run = f"{work}/zero3/tiny_gpt"
    path = f"{run}/metrics.jsonl" if rank == 0 else f"{run}/logs/metrics-rank-{rank}.jsonl"
    with open(path) as f:
        mem = [m for m in map(json.loads, f) if "mem" in m][-1]["mem"]
    peak = sum(c["peak"] for name, c in mem.items() if name != "other")
    bound = 1.2 * (state / 8 + mem["activations"]["peak"] + 2 * 4 * block)
    worst = max(worst, peak / bound)
    print(f"rank {rank}: peak {peak / 2**20:.2f} MB (parameters {mem['parameters']['peak'] / 2**20:.2f}, "
          f"gradients {mem['gradients']['peak'] / 2**20:.2f}, optimizer "
          f"{mem['optimizer']['peak'] / 2**20:.2f}, activations {mem['activations']['peak'] / 2**20:.2f}, "
          f"communication {mem['communication']['peak'] / 2**20:.2f}, other {mem['other']['peak'] / 2**20:.2f}) "
          f"against the bound {bound / 2**20:.2f} MB: {peak / bound:.3f}x")
if worst > 1.0:
    sys.exit(f"FAIL: a rank's peak is {worst:.3f}x the bound")
print("PASS")
PY
