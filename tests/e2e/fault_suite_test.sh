#!/usr/bin/env bash
# The scripted fault suite (LOOM_FAULT, see src/loom/train/fault.h), on the tiny GPT:
#  - checkpoints written in the background (train.async_checkpoint) equal synchronous ones;
#  - kill -9 of rank 1 and then of rank 0, at random steps of a 4-rank ZeRO-3 run under
#    `loom launch --max-restarts 3`: the run completes, its final checkpoint is bitwise equal to
#    an uninterrupted run's, each restart recomputed at most one checkpoint interval, and
#    events.jsonl logs each restart with its cause;
#  - a flipped byte in, or the truncation of, the newest checkpoint: `--resume auto` says so and
#    resumes from the one before (ending bitwise where an uninterrupted run ends);
#  - a NaN loss at step 6: the step is skipped and counted, the run goes on, and its final loss
#    is within 3% of a clean run's;
#  - NaN at steps 7-9 (3 in a row): the run rolls back to the step-5 checkpoint and goes on with
#    step 10's data, ending bitwise where a run that skipped steps 6-9 ends;
#  - a stalled rank: the others' collective times out within dist.timeout_s, naming it; with a
#    long timeout, `launch --hang-timeout` sees the heartbeats stop and restarts the job;
#  - start-up is not a hang: a rank that starts 12 s late under `--hang-timeout 5` is not
#    ended; one that never starts is ended by `--startup-timeout`, naming it, and restarted;
#  - a rank slowed to twice its step time is flagged as a straggler (and no other rank is);
#  - one flipped bit in one replica's weights stops the run at the next consistency check,
#    naming that rank, before the state is checkpointed; so does one in a norm's weight on one
#    of 4 tensor-parallel ranks (which hold it alike);
#  - a loss spike (one batch's loss 10x) under resilience.spike_rollback: skipped, the run rolls
#    back to the last checkpoint, replays the steps after it with the same losses and skips the
#    spike's batch again; the held-out loss ends within 1% of a run without the spike.
# Usage: fault_suite_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cfg=$here/tiny_gpt.toml
# One run id for all runs: it is part of every checkpoint's bytes, which are compared.
common=(--set run.id=cmp --set train.steps=20 --set train.log_every=1 --set model.depth=2 --set train.batch_size=8
  --set eval.every=0 --set sample.tokens=0)
same_checkpoint() {  # every file of two checkpoint directories byte for byte
  local a=$1 b=$2
  [ "$(ls "$a")" = "$(ls "$b")" ] || return 1
  for f in $(ls "$a"); do cmp -s "$a/$f" "$b/$f" || return 1; done
}

# --- kill -9 under the supervisor ---
z3=("${common[@]}" --set train.ckpt_every=5 --set parallel.data_parallel=zero3)
"$loom" launch -n 4 -- train "$cfg" "${z3[@]}" --set run.out_dir="$work/ref" > "$work/ref.log" 2>&1 ||
  fail "uninterrupted 4-rank run failed"
# Checkpoints written in the background hold exactly what synchronous ones do.
"$loom" launch -n 4 -- train "$cfg" "${z3[@]}" --set train.async_checkpoint=true \
  --set run.out_dir="$work/async" > "$work/async.log" 2>&1 || fail "4-rank run with async checkpoints failed"
for step in 000015 000020; do
  same_checkpoint "$work/ref/tiny_gpt/step-$step" "$work/async/tiny_gpt/step-$step" ||
    fail "async checkpoint step-$step differs from the synchronous one"
done
k1=$((2 + RANDOM % 16))
k2=$((k1 + 1 + RANDOM % (20 - k1)))
echo "killing rank 1 at step $k1, then rank 0 at step $k2"
LOOM_FAULT="kill:rank=1,step=$k1;kill:rank=0,step=$k2,attempt=1" \
  "$loom" launch -n 4 --max-restarts 3 -- train "$cfg" "${z3[@]}" --set run.out_dir="$work/kill" \
  > "$work/kill.log" 2>&1 || fail "the supervised run did not complete: $(tail -3 "$work/kill.log")"
same_checkpoint "$work/ref/tiny_gpt/step-000020" "$work/kill/tiny_gpt/step-000020" &&
  echo "ok: final checkpoint bitwise equal to the uninterrupted run's" ||
  fail "final checkpoint differs from the uninterrupted run's"
/usr/bin/python3 - "$work/kill.log" 5 <<'PY' || fail "a restart recomputed more than one checkpoint interval"
import re, sys
log, interval = open(sys.argv[1]).read(), int(sys.argv[2])
kills = [int(k) for k in re.findall(r"^LOOM_FAULT: rank \d+ kills itself at step (\d+)", log, re.M)]
# Each restart either resumes from a checkpoint or, killed before the first one, starts over.
resumes = [int(m.group(1) or 0) for m in
           re.finditer(r"resumed from \S+ at step (\d+)|resume auto: .* no checkpoint on disk yet; it starts from step 0", log)]
if len(kills) != len(resumes) or not kills:
    sys.exit(f"kills {kills} and resumes {resumes} do not pair up")
for k, r in zip(kills, resumes):
    redone = (k - 1) - r  # steps r+1 .. k-1 ran before the kill and again after it
    print(f"ok: killed at step {k}, resumed at step {r}: {redone} steps recomputed (interval {interval})")
    if redone > interval:
        sys.exit(1)
PY
n=$(grep -c '"event":"restart"' "$work/kill/tiny_gpt/events.jsonl" 2>/dev/null)
[ "$n" -ge 1 ] && grep -q '"cause":"[^"]*kills itself' "$work/kill/tiny_gpt/events.jsonl" &&
  echo "ok: events.jsonl logs $n restarts with their cause" || fail "events.jsonl lacks the restarts"

# --- a damaged newest checkpoint ---
one=("${common[@]}" --set train.ckpt_every=5 --set train.keep_checkpoints=3)
"$loom" train "$cfg" "${one[@]}" --set train.steps=15 --set run.out_dir="$work/ref15" > "$work/ref15.log" 2>&1 ||
  fail "uninterrupted 15-step run failed"
for damage in corrupt truncate; do
  out=$work/$damage
  LOOM_FAULT="$damage:step=10,file=rank-00000.safetensors" "$loom" train "$cfg" "${one[@]}" \
    --set train.steps=15 --set train.stop_after=10 --set run.out_dir="$out" > "$out-a.log" 2>&1 ||
    fail "$damage: first run failed"
  "$loom" train "$cfg" "${one[@]}" --set train.steps=15 --set run.out_dir="$out" --resume auto \
    > "$out-b.log" 2>&1 || fail "$damage: --resume auto failed: $(grep error "$out-b.log")"
  grep -q "passing over damaged checkpoint .*step-000010" "$out-b.log" &&
    grep -q "resumed from .*step-000005 at step 5" "$out-b.log" &&
    echo "ok: $damage: $(grep -o 'passing over damaged checkpoint.*' "$out-b.log" | cut -c1-160)..." ||
    fail "$damage: --resume auto did not fall back to step 5"
  same_checkpoint "$work/ref15/tiny_gpt/step-000015" "$out/tiny_gpt/step-000015" ||
    fail "$damage: the run resumed from step 5 does not end where the uninterrupted one does"
done

# --- NaN ---
"$loom" launch -n 2 -- train "$cfg" "${common[@]}" --set run.out_dir="$work/clean" > "$work/clean.log" 2>&1 ||
  fail "clean 2-rank run failed"
LOOM_FAULT="nan:rank=1,step=6" "$loom" launch -n 2 -- train "$cfg" "${common[@]}" \
  --set run.out_dir="$work/nan" > "$work/nan.log" 2>&1 || fail "the run with a NaN did not complete"
grep -q "step 6 skipped (not finite): loss nan" "$work/nan.log" || fail "the NaN step was not reported as skipped"
/usr/bin/python3 - "$work/clean/tiny_gpt/metrics.jsonl" "$work/nan/tiny_gpt/metrics.jsonl" <<'PY' ||
import json, sys
clean = [m for m in map(json.loads, open(sys.argv[1])) if "loss" in m]  # step records
nan = [m for m in map(json.loads, open(sys.argv[2])) if "loss" in m]
assert nan[-1]["step"] == 20 and nan[-1]["skipped_steps"] == 1, nan[-1]
assert clean[-1]["skipped_steps"] == 0
rel = abs(nan[-1]["loss"] - clean[-1]["loss"]) / clean[-1]["loss"]
print(f"ok: NaN at step 6 skipped and counted; final loss {nan[-1]['loss']:.4f} vs clean "
      f"{clean[-1]['loss']:.4f} ({rel:.2%})")
sys.exit(0 if rel < 0.03 else 1)
PY
  fail "NaN run: not counted, or final loss not within 3% of the clean run"

# --- three bad steps in a row: roll back to the last checkpoint, skip the data since ---
# NaN at steps 7-9 with max_skips_in_row 3 rolls back to step 5 after step 9 and goes on with
# step 10's data: the state must be the one a run ends with that skipped steps 6-9 outright.
rb=("${common[@]}" --set train.ckpt_every=5)
LOOM_FAULT="nan:rank=1,step=7;nan:rank=1,step=8;nan:rank=1,step=9" "$loom" launch -n 2 -- \
  train "$cfg" "${rb[@]}" --set run.out_dir="$work/rollback" > "$work/rollback.log" 2>&1 ||
  fail "the run that rolls back did not complete: $(grep -m1 error "$work/rollback.log")"
LOOM_FAULT="nan:rank=1,step=6;nan:rank=1,step=7;nan:rank=1,step=8;nan:rank=1,step=9" \
  "$loom" launch -n 2 -- train "$cfg" "${rb[@]}" --set resilience.max_skips_in_row=10 \
  --set run.out_dir="$work/skip4" > "$work/skip4.log" 2>&1 || fail "the run skipping steps 6-9 failed"
grep -q "step 9: 3 steps in a row skipped; rolled back to .*step-000005 and skipping the data of steps 6-9" \
  "$work/rollback.log" && grep -q '"event":"rollback"' "$work/rollback/tiny_gpt/events.jsonl" &&
  echo "ok: $(grep -o 'step 9: 3 steps in a row.*' "$work/rollback.log" | sed 's|/.*/step|step|')" ||
  fail "no rollback reported: $(grep -m3 'skipped\|error' "$work/rollback.log")"
same_checkpoint "$work/skip4/tiny_gpt/step-000020" "$work/rollback/tiny_gpt/step-000020" &&
  echo "ok: after the rollback the run ends bitwise where a run skipping steps 6-9 ends" ||
  fail "the rolled-back run does not end where a run skipping steps 6-9 ends"

# --- a stalled rank ---
start=$SECONDS
LOOM_FAULT="stall:rank=2,step=4" "$loom" launch -n 4 -- train "$cfg" "${common[@]}" \
  --set dist.timeout_s=3 --set run.out_dir="$work/stall" > "$work/stall.log" 2>&1 &&
  fail "a stalled rank went unnoticed"
elapsed=$((SECONDS - start))
grep -q "did not finish within 3 s.*ranks that had not arrived: 2" "$work/stall.log" &&
  echo "ok: stall reported in ${elapsed}s: $(grep -o 'dist: .*' "$work/stall.log" | head -1 | cut -c1-200)" ||
  fail "the stall report does not name rank 2: $(grep -m2 error "$work/stall.log")"
[ $elapsed -lt 40 ] || fail "the stall took ${elapsed}s to report"

# --- a hang the collective timeout would take long to catch: the supervisor's heartbeat watch
LOOM_FAULT="stall:rank=2,step=4" "$loom" launch -n 4 --max-restarts 1 --hang-timeout 5 -- \
  train "$cfg" "${common[@]}" --set dist.timeout_s=600 --set run.out_dir="$work/hang" \
  > "$work/hang.log" 2>&1 || fail "the hung job was not restarted to completion"
grep -q '"event":"restart".*"cause":"no progress for 5 s' "$work/hang/tiny_gpt/events.jsonl" &&
  echo "ok: $(grep -o 'launch: no progress.*' "$work/hang.log" | head -1 | cut -c1-160)" ||
  fail "the hang was not logged as the restart's cause"

# --- start-up slower than the hang timeout (a large checkpoint to load) is not a hang ---
LOOM_FAULT="startup:rank=3,ms=12000" "$loom" launch -n 4 --max-restarts 1 --hang-timeout 5 -- \
  train "$cfg" "${common[@]}" --set dist.timeout_s=600 --set run.out_dir="$work/slow_start" \
  > "$work/slow_start.log" 2>&1 || fail "the job that started slowly did not complete"
grep -q "LOOM_FAULT: rank 3 starts up 12000 ms late" "$work/slow_start.log" ||
  fail "the start-up delay was not injected"
if grep -q '"event":"restart"' "$work/slow_start/tiny_gpt/events.jsonl" 2>/dev/null ||
   grep -q "^launch: .*ending the job" "$work/slow_start.log"; then
  fail "a slow start-up was taken for a hang: $(grep -m1 '^launch: .*ending' "$work/slow_start.log")"
else
  echo "ok: a start-up of 12 s under --hang-timeout 5 ran to completion in one attempt"
fi
# ... but start-up has its own bound, and its message names the rank that never began.
LOOM_FAULT="startup:rank=1,ms=600000" "$loom" launch -n 4 --max-restarts 1 --hang-timeout 5 \
  --startup-timeout 20 -- train "$cfg" "${common[@]}" --set dist.timeout_s=600 \
  --set run.out_dir="$work/no_start" > "$work/no_start.log" 2>&1 ||
  fail "the job whose rank never started was not restarted to completion"
grep -q '"event":"restart".*"cause":"start-up took more than 20 s (launch --startup-timeout): rank(s) 1 of 4 never began a step' \
  "$work/no_start/tiny_gpt/events.jsonl" &&
  echo "ok: $(grep -o 'launch: start-up took.*' "$work/no_start.log" | head -1 | cut -c1-160)" ||
  fail "the start-up timeout was not logged as the restart's cause, naming rank 1"

# --- a straggler (2 ranks: one per core, so the others' times are not inflated by sharing) ---
LOOM_FAULT="slow:rank=1,step=1,factor=2" "$loom" launch -n 2 -- train "$cfg" "${common[@]}" \
  --set model.width=64 --set train.batch_size=32 --set resilience.straggler_every=4 \
  --set run.out_dir="$work/slow" > "$work/slow.log" 2>&1 || fail "the run with a slow rank failed"
grep -q "^straggler: rank 1 on " "$work/slow.log" && grep -q '"event":"straggler","step":[0-9]*,"rank":1' \
  "$work/slow/tiny_gpt/events.jsonl" && echo "ok: $(grep -m1 '^straggler' "$work/slow.log")" ||
  fail "rank 1 (slowed 2x) was not flagged"
grep "^straggler: rank 0 " "$work/slow.log" && fail "rank 0, not slowed, was flagged"

# --- silent data corruption: one replica's weight changes by one bit ---
LOOM_FAULT="bitflip:rank=2,step=7" "$loom" launch -n 4 -- train "$cfg" "${common[@]}" \
  --set resilience.consistency_every=5 --set train.ckpt_every=10 --set run.out_dir="$work/flip" \
  > "$work/flip.log" 2>&1 && fail "a flipped bit went unnoticed"
grep -q "step 10: the replicas of group dp .* differing from the majority: 2 (" "$work/flip.log" &&
  echo "ok: $(grep -o 'step 10: the replicas.*' "$work/flip.log" | head -1 | cut -c1-200)" ||
  fail "the mismatch report does not name rank 2: $(grep -m2 error "$work/flip.log")"
[ ! -d "$work/flip/tiny_gpt/step-000010" ] || fail "the corrupted state was checkpointed"
# ... and one bit of a norm that tensor parallelism does not split, on one of 4 tp ranks.
LOOM_FAULT="bitflip:rank=1,step=3,param=norm" "$loom" launch -n 4 -- train "$cfg" "${common[@]}" \
  --set model.heads=4 --set parallel.tp=4 --set resilience.consistency_every=2 \
  --set run.out_dir="$work/tpflip" > "$work/tpflip.log" 2>&1 && fail "a flipped bit under tp went unnoticed"
grep -q "step 4: the tensor-parallel ranks of group tp .* differing from the majority: 1 (" "$work/tpflip.log" &&
  echo "ok: $(grep -o 'step 4: the tensor-parallel.*' "$work/tpflip.log" | head -1 | cut -c1-200)" ||
  fail "the tp mismatch report does not name rank 1: $(grep -m2 error "$work/tpflip.log")"

# ... and on one of 4 context-parallel ranks (which split the sequence, not the weights).
LOOM_FAULT="bitflip:rank=1,step=3,param=norm" "$loom" launch -n 4 -- train "$cfg" "${common[@]}" \
  --set parallel.cp=4 --set resilience.consistency_every=2 \
  --set run.out_dir="$work/cpflip" > "$work/cpflip.log" 2>&1 && fail "a flipped bit under cp went unnoticed"
grep -q "step 4: the context-parallel ranks of group cp .* differing from the majority: 1 (" "$work/cpflip.log" &&
  echo "ok: $(grep -o 'step 4: the context-parallel.*' "$work/cpflip.log" | head -1 | cut -c1-200)" ||
  fail "the cp mismatch report does not name rank 1: $(grep -m2 error "$work/cpflip.log")"

# --- a loss spike (one batch's loss 10x): skip it, roll back, replay, skip its batch again ---
sp=(--set run.id=cmp --set train.steps=40 --set train.log_every=1 --set model.depth=2
  --set train.batch_size=8 --set eval.every=0 --set sample.tokens=0 --set train.ckpt_every=10)
"$loom" train "$cfg" "${sp[@]}" --set run.out_dir="$work/spike_clean" > "$work/spike_clean.log" 2>&1 ||
  fail "the run without a spike failed"
LOOM_FAULT="spike:step=26,factor=10" "$loom" train "$cfg" "${sp[@]}" --set resilience.spike_rollback=true \
  --set run.out_dir="$work/spike" > "$work/spike.log" 2>&1 || fail "the run with a spike failed"
spike_check=("$work/spike.log" "$work/spike/tiny_gpt" "$work/spike_clean/tiny_gpt")
/usr/bin/python3 - "${spike_check[@]}" <<'PY' || fail "the spike's rollback and replay: $work/spike.log"
import json, re, sys
log, run, clean = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
events = [json.loads(l) for l in open(run + "/events.jsonl")]
kinds = [(e["event"], e.get("step")) for e in events if e["event"] != "started"]
want = [("loss_spike", 26), ("skipped_step", 26), ("rollback", 26), ("skipped_step", 26), ("finished", 40)]
assert kinds == want, kinds
rb = [e for e in events if e["event"] == "rollback"][0]
assert rb["replay_from"] == 21 and rb["skipped_batch_step"] == 26, rb
# Steps 21-25 ran twice, from the step-20 checkpoint with their own data: the same losses.
seen = {}
for step, loss in re.findall(r"^step +(\d+)/40 \| loss ([0-9.]+)", log, re.M):
    seen.setdefault(int(step), []).append(loss)
assert all(len(seen[s]) == 2 and seen[s][0] == seen[s][1] for s in range(21, 27)), seen
assert all(len(seen[s]) == 1 for s in list(range(1, 21)) + list(range(27, 41))), seen
final = lambda r: [json.loads(l) for l in open(r + "/metrics.jsonl")][-1]["final_eval"]["nats_per_token"]
a, b = final(run), final(clean)
print(f"ok: spike at step 26 skipped, rolled back to step 20, steps 21-25 replayed with the same "
      f"losses, step 26's batch skipped; held-out {a:.4f} against {b:.4f} without the spike "
      f"({100 * (a - b) / b:+.2f}%)")
assert abs(a - b) <= 0.01 * b
PY

[ $failures -eq 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
