#!/usr/bin/env bash
# `loom train --dry-run`: its memory table per pipeline rank against what the same layout
# measures when it runs (the most any rank of the stage holds at its peak, per category, from
# metrics.jsonl), within 15% for each category of more than 50 KB (smaller ones: both under
# 50 KB). Communication buffers are the most a rank may hold (one or two groups' exchanges alive
# at once, by timing): measured at most that, plus 15%. So are ZeRO-2/3's gradients (a block's
# full gradients freed as soon as its reduce-scatter has arrived, which a step may or may not see
# before the next block's are made): measured between the least the dry run states, less 15%,
# and the most, plus 15%. The total within 15%.
#   - a GPT on four axes, 16 processes: pp 2 x dp_shard 2 (ZeRO-1) x cp 2 (ring) x tp 2;
#   - a DiT on 4 processes: ZeRO-3 over dp_shard 2 x tp 2 with full recompute.
# Also: the dry run starts no processes and writes nothing, prints the config keys that differ
# from the defaults, and a layout that does not fit the processes given is one clear error.
# Usage: dry_run_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# check NAME PROCESSES CONFIG OVERRIDES...: dry run, then the run; every rank against its stage.
check() {
  local name=$1 np=$2 cfg=$3
  shift 3
  "$loom" train "$cfg" --dry-run --processes "$np" --set run.out_dir="$work/$name" "$@" \
    > "$work/$name.dry" 2>&1 || { fail "$name: dry run failed: $(cat "$work/$name.dry")"; return; }
  [ -e "$work/$name" ] && fail "$name: the dry run wrote $work/$name"
  "$mpirun" --oversubscribe -np "$np" "$loom" train "$cfg" --set run.out_dir="$work/$name" \
    --set train.steps=3 --set train.log_every=1 "$@" > "$work/$name.log" 2>&1 ||
    { fail "$name: the run failed: $(tail -5 "$work/$name.log")"; return; }
  /usr/bin/python3 - "$work/$name.dry" "$work/$name" "$np" <<'PY' || fail "$name: the dry run's memory is not the run's"
import glob, json, os, re, sys
dry, out, np = sys.argv[1], sys.argv[2], int(sys.argv[3])
run = os.path.dirname(glob.glob(f"{out}/*/metrics.jsonl")[0])
cats = ["parameters", "gradients", "optimizer", "activations", "communication"]
predicted, least = {}, {}
for line in open(dry):
    m = re.match(r"\s+pp (\d+)\s+(\d+)\s+" + r"\s+".join([r"([\d.]+)"] * 6) + r"\s*$", line)
    if m:
        predicted[int(m.group(1))] = [float(x) * 1e6 for x in m.groups()[2:7]]
    m = re.match(r"\s+pp (\d+) gradients: ([\d.]+) MB at the least", line)
    if m:
        least[int(m.group(1))] = float(m.group(2)) * 1e6
pp = len(predicted)
assert pp > 0, "no memory table in the dry run"
measured = {}  # stage -> the most any of its ranks holds, per category
for rank in range(np):
    f = f"{run}/metrics.jsonl" if rank == 0 else f"{run}/logs/metrics-rank-{rank}.jsonl"
    mem = [m for m in map(json.loads, open(f)) if "mem" in m][-1]["mem"]
    stage = rank // (np // pp)  # the mesh's first axis is pp
    most = measured.setdefault(stage, [0.0] * len(cats))
    for i, cat in enumerate(cats):
        most[i] = max(most[i], mem[cat]["peak"])
bad = 0
for stage in sorted(measured):
    rows = list(zip(cats, predicted[stage], measured[stage]))
    if stage in least:
        print(f"pp {stage} gradients at the least {least[stage] / 1e6:.3f} MB (by timing)")
    rows.append(("total", sum(predicted[stage]), sum(measured[stage])))
    for cat, want, got in rows:
        if cat == "communication":
            ok = got <= 1.15 * want + 5e4
        elif cat == "gradients" and stage in least:  # by timing: between its least and most
            ok = 0.85 * least[stage] <= got <= 1.15 * want
        else:
            ok = (got < 5e4 and want < 5e4) or abs(want - got) <= 0.15 * got
        print(f"pp {stage} {cat:13s} measured {got / 1e6:8.3f} MB, predicted {want / 1e6:8.3f} MB "
              f"({(want - got) / max(got, 1) * 100:+.1f}%){'' if ok else '  <- off'}")
        bad += not ok
sys.exit(1 if bad else 0)
PY
}

gpt=(--set model.width=128 --set model.depth=4 --set model.heads=4 --set model.context=64
  --set train.batch_size=8 --set train.grad_accum=2 --set eval.every=0 --set sample.tokens=0
  --set parallel.pp=2 --set parallel.dp_shard=2 --set parallel.cp=2 --set parallel.tp=2
  --set parallel.data_parallel=zero1)
check gpt4axes 16 "$here/tiny_gpt.toml" "${gpt[@]}"
grep -q "^layout: pp 2 x dp_replicate 1 x dp_shard 2 x cp 2 x tp 2 = 16 processes" "$work/gpt4axes.dry" ||
  fail "the dry run does not show the layout: $(grep layout "$work/gpt4axes.dry")"
grep -q "^  parallel.data_parallel = 'zero1'   (default 'ddp')" "$work/gpt4axes.dry" &&
  ! grep -q "^  optim.lr = " "$work/gpt4axes.dry" ||
  fail "the dry run's config is not what differs from the defaults: $(sed -n '3,30p' "$work/gpt4axes.dry")"

dit=(--set model.width=96 --set model.depth=2 --set model.heads=4 --set model.patch=2
  --set train.batch_size=8 --set sample.per_class=1 --set parallel.dp_shard=2 --set parallel.tp=2
  --set parallel.data_parallel=zero3 --set parallel.activation_checkpointing=full)
check dit_zero3 4 "$here/tiny_dit.toml" "${dit[@]}"

# A layout that the processes given cannot hold: one line naming the degrees, nothing written.
"$loom" train "$here/tiny_gpt.toml" --dry-run --processes 12 --set run.out_dir="$work/bad" \
  "${gpt[@]}" > "$work/bad.out" 2> "$work/bad.err" && fail "a dry run of 16 degrees on 12 processes passed"
[ "$(wc -l < "$work/bad.err")" = 1 ] && grep -q "12" "$work/bad.err" && [ ! -e "$work/bad" ] ||
  fail "a layout too large for the processes: $(cat "$work/bad.err")"

[ $failures -eq 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
