#!/usr/bin/env bash
# The warmup-stable-decay schedule timed to train.max_minutes (train/decay_timing.h), end to end
# on the tiny DiT: a run with a step ceiling it cannot reach fixes its decay once half its
# 8-second budget is used, ends with the decay (before the budget), and logs every step's
# learning rate as the schedule's definition gives it (checked here in float64 from the decay's
# logged first and last step); a run resumed inside the decay keeps it and ends bit-identical
# to the uninterrupted one.
# Usage: timed_decay_test.sh LOOM_BINARY WORK_DIR
set -euo pipefail
loom=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

timed=(--set run.id=timed --set train.steps=1000000 --set train.max_minutes=0.1333
       --set optim.schedule=wsd --set optim.decay_fraction=0.5 --set optim.min_lr_ratio=0.1
       --set train.log_every=1 --set train.ckpt_every=40 --set train.keep_checkpoints=100000
       --set run.tensorboard=false --set eval.val_images=0 --set sample.per_class=1)
start=$(date +%s%N)
"$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/a" "${timed[@]}" > "$work/a.log"
wall=$(( ($(date +%s%N) - start) / 1000000 ))  # ms
run=$work/a/tiny_dit
range=$(sed -n 's/^decay of the learning rate timed to the budget: steps \([0-9]*\)\.\.\([0-9]*\),.*/\1 \2/p' "$work/a.log")
[ -n "$range" ] || fail "no timed decay in the log: $(tail -3 "$work/a.log")"
read -r first end <<< "$range"
grep -q "stopping after step $end (the decay timed to the budget is done" "$work/a.log" ||
  fail "the run did not end with its decay at step $end: $(tail -3 "$work/a.log")"
/usr/bin/python3 - "$run" "$first" "$end" "$wall" <<'PY' || fail "timed decay's learning rates"
import json, sys
run, first, end, wall = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) / 1000
peak, floor, warmup = 1e-3, 1e-4, 2
m = [x for x in map(json.loads, open(run + "/metrics.jsonl")) if "loss" in x]  # step records
steps = [x["step"] for x in m]
assert steps[-1] == end, (steps[-1], end)
assert first > warmup and end - first >= 10, (first, end)
def lr(step):  # step counted from 1 in metrics.jsonl
    s = step - 1
    if s < warmup: return peak * (s + 1) / warmup
    if s < first: return peak
    return peak + (floor - peak) * min(1.0, (s - first) / (end - first))
bad = [(x["step"], x["lr"], lr(x["step"])) for x in m if abs(x["lr"] - lr(x["step"])) > 1e-9]
assert not bad, bad[:5]
events = [json.loads(l) for l in open(run + "/events.jsonl")]
timed = [e for e in events if e.get("event") == "decay_timed"]
assert len(timed) == 1 and timed[0]["decay_start"] == first and timed[0]["decay_end"] == end, timed
# The decay began once half the 8 s budget was used and ended before the budget.
assert wall < 8 + 30, wall
print(f"ok: decay timed to the budget over steps {first}..{end}, every logged lr as defined")
PY
# Resumed from the first checkpoint inside the decay: the same decay, the same end, the same
# weights.
ckpt=$(cd "$run" && ls -d step-* | awk -F- -v f="$first" -v e="$end" '$2+0 > f && $2+0 < e' | head -1)
if [ -z "$ckpt" ]; then
  fail "no checkpoint inside the decay ($first..$end)"
else
  cp -r "$work/a" "$work/b"
  (cd "$work/b/tiny_dit" && for d in step-*; do [[ "$d" > "$ckpt" ]] && rm -rf "$d"; done
   echo "$ckpt" > latest)
  "$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/b" "${timed[@]}" --resume > "$work/b.log"
  grep -q "stopping after step $end (the decay timed" "$work/b.log" ||
    fail "the resumed run did not end at step $end: $(tail -3 "$work/b.log")"
  last=$(printf 'step-%06d' "$end")
  cmp -s "$run/$last/rank-00000.safetensors" "$work/b/tiny_dit/$last/rank-00000.safetensors" &&
    echo "ok: resumed at $ckpt, the same decay and the same weights at $last" ||
    fail "the run resumed at $ckpt differs at $last"
fi
[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all timed-decay checks passed"
