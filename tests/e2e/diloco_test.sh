#!/usr/bin/env bash
# DiLoCo through `loom train` (lowcomm/diloco.h): the tiny GPT and DiT as 2 workers of 1
# process (and the GPT as 2 workers of 2 ZeRO-2 shards), inner_steps 4:
#   - an outer step after every 4th step, sending exactly an f32 all-reduce of the weights
#     (int4: at least 6x less), and after the last one every worker holds the global weights;
#   - Streaming DiLoCo (2 fragments, overlap 1, mixing 0.5): its outer steps, the workers agreeing
#     at the end;
#   - a run stopped mid-phase (step 6; streaming: step 2, an exchange in flight) and resumed
#     ends bit-identical to the uninterrupted one;
#     so does one whose worker is killed at step 7 under `loom launch --max-restarts`;
#   - a mixture of experts: each worker balances its experts on its own loads during a round,
#     the workers' selection biases averaged at its end and checkpointed per worker; with its
#     experts split over each worker's 2 ranks (ep 2) equal to every expert on each rank;
#   - between outer steps a worker sends nothing (its bytes-sent count stands still); a rollback
#     due on one worker and a SIGTERM to one worker are acted on by both, at a round's end;
#   - bad input, one clear error each: dp_replicate against lowcomm.workers, train.steps not a
#     multiple of inner_steps (nor inner_steps of fragments), overlap_steps too long, a batch
#     that does not split over the workers, DiLoCo keys without the method, ranks started with
#     different configs; and a 2-worker run resumed by 4 workers (each continuing worker m mod 2).
# Usage: diloco_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
py=/usr/bin/python3

# check_run RUN_DIR STEPS COMPRESSION SHARDS: the outer steps in metrics.jsonl (STEPS: "4,8"),
# the bytes rank 0
# sent to the other worker against its share of the weights (1 / SHARDS under ZeRO), and
# every worker's weights (model/, worker<m>/model/) equal to the global ones at the end.
check_run() {
  PYTHONPATH=$here $py - "$@" <<'PY'
import json, os, sys
import numpy as np
from sharded_checkpoint import read_checkpoint
run, expected, compression, shards = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lines = [m for m in map(json.loads, open(os.path.join(run, "metrics.jsonl"))) if "loss" in m]
outer = [m for m in lines if "outer" in m]
steps = max(m["step"] for m in lines)
assert [m["step"] for m in outer] == [int(s) for s in expected.split(",")], [m["step"] for m in outer]
ckpt = sorted(d for d in os.listdir(run) if d.startswith("step-"))[-1]
t = read_checkpoint(os.path.join(run, ckpt))
weights = t["model"]
n = sum(v.size for v in weights.values())
sent = outer[-1]["outer"]["sent_mb"] * 1e6
f32 = 2 * (2 - 1) / 2 * 4 * n / shards  # an f32 all-reduce of rank 0's share over 2 workers
if compression == "stream":  # the last step brings both fragments: about the whole model
    assert abs(sent - f32) <= 0.1 * f32, (sent, f32)
elif compression == "none":
    assert abs(sent - f32) <= 1, (sent, f32)
else:
    assert sent * 6 <= f32, (sent, f32)
if shards == 1 and compression != "stream":  # nothing crosses between outer steps
    sent_by = {m["step"]: m["sent_mb"] for m in lines}
    for s in range(2, steps + 1):
        if s % 4:
            assert sent_by[s] == sent_by[s - 1], ("bytes sent in step", s, sent_by)
for name, w in weights.items():
    assert np.array_equal(w, t["worker1"]["model/" + name]), ("worker 1", name)
    assert np.array_equal(w, t["diloco_global"][name]), ("global", name)
print(f"{run}: {len(outer)} outer steps, {sent:.0f} bytes each of an f32 all-reduce's {f32:.0f}; "
      f"the workers agree")
PY
}

gpt=$here/tiny_gpt.toml
common=(--set train.steps=8 --set train.log_every=1 --set model.depth=2 --set train.batch_size=8
  --set eval.every=0 --set sample.tokens=0 --set run.id=cmp --set lowcomm.method=diloco
  --set lowcomm.workers=2 --set lowcomm.inner_steps=4)
run() {  # run NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  "$mpirun" --oversubscribe -np "$np" "$loom" train "$@" --set run.out_dir="$work/$name" \
    > "$work/$name.log" 2>&1
}

for compression in none int4; do
  run gpt-$compression 2 "$gpt" "${common[@]}" --set lowcomm.compression=$compression ||
    { fail "gpt $compression: run failed"; cat "$work/gpt-$compression.log"; }
  check_run "$work/gpt-$compression/tiny_gpt" 4,8 $compression 1 || fail "gpt $compression: outer steps"
done
run gpt-zero 4 "$gpt" "${common[@]}" --set parallel.data_parallel=zero2 ||
  { fail "gpt zero2 in each worker: run failed"; cat "$work/gpt-zero.log"; }
check_run "$work/gpt-zero/tiny_gpt" 4,8 none 2 || fail "gpt zero2 in each worker: outer steps"
grep -q "2 DiLoCo workers x 2 shards: zero2" "$work/gpt-zero.log" || fail "layout not described"
# Streaming: 2 fragments, each exchange overlapped with 1 inner step and merged (mixing 0.5):
# fragment 1 applied at steps 3 and 7, fragment 0 at 5, and both at the end (step 8).
stream=(--set lowcomm.fragments=2 --set lowcomm.overlap_steps=1 --set lowcomm.mixing=0.5)
run gpt-stream 2 "$gpt" "${common[@]}" "${stream[@]}" ||
  { fail "gpt streaming: run failed"; cat "$work/gpt-stream.log"; }
check_run "$work/gpt-stream/tiny_gpt" 3,5,7,8 stream 1 || fail "gpt streaming: outer steps"
# A mixture of experts (4 experts top 2, aux-loss-free biases): each worker sums its expert loads
# over its own ranks (nothing crosses between outer steps: rank 0 logs its worker's 4 x 16
# tokens x top 2 per layer, not the 8 of both workers), its biases follow its own loads and are
# averaged over the workers at every outer step: equal at the end, and checkpointed per worker.
moe=(--set model.style=llama --set moe.experts=4 --set moe.top_k=2 --set moe.hidden=32
  --set moe.shared_experts=1 --set moe.bias_rate=0.01)
run gpt-moe 2 "$gpt" "${common[@]}" "${moe[@]}" || { fail "gpt moe: run failed"; cat "$work/gpt-moe.log"; }
check_run "$work/gpt-moe/tiny_gpt" 4,8 none 1 || fail "gpt moe: outer steps"
$py - "$work/gpt-moe/tiny_gpt" <<'PY' || fail "gpt moe: loads or biases not the worker's own"
import json, os, sys
run = sys.argv[1]
lines = [m for m in map(json.loads, open(os.path.join(run, "metrics.jsonl"))) if "loss" in m]
for m in lines:
    for name, layer in m["moe"]["layers"].items():
        assert sum(layer["load"]) == 4 * 16 * 2, (m["step"], name, layer["load"])
state = json.load(open(os.path.join(run, "step-000008", "trainer_state.json")))
workers = state["moe_selection_bias_workers"]
assert len(workers) == 2 and workers[0] == workers[1] == state["moe_selection_bias"], workers
assert any(b != 0 for layer in workers[0].values() for b in layer), workers[0]
PY
# Expert parallelism inside the workers: 2 workers of 2 processes, each worker's experts split
# over its 2 ranks (ep 2), equal to the same workers with every expert on each rank.
run gpt-moe-dp 4 "$gpt" "${common[@]}" "${moe[@]}" --set run.id=ep || fail "gpt moe x2 x2: run failed"
run gpt-moe-ep 4 "$gpt" "${common[@]}" "${moe[@]}" --set run.id=ep --set parallel.ep=2 ||
  { fail "gpt moe ep 2 inside the workers: run failed"; cat "$work/gpt-moe-ep.log"; }
grep -q "experts over ep 2" "$work/gpt-moe-ep.log" || fail "gpt moe ep 2: not the layout asked for"
echo -n "gpt moe, ep 2 inside 2 DiLoCo workers vs every expert on each rank: "
$py "$here/compare_runs.py" "$work/gpt-moe-dp/tiny_gpt" "$work/gpt-moe-ep/tiny_gpt" 1e-5 \
  --weights-rtol=1e-4 || fail "gpt moe: ep 2 inside the workers changes the run"

# The commands that read a checkpoint read a DiLoCo run's (worker 0's weights: the global ones).
for cmd in "eval $work/gpt-none/tiny_gpt --windows 4" "ckpt verify $work/gpt-none/tiny_gpt"; do
  $loom $cmd > "$work/read.log" 2>&1 || { fail "loom $cmd failed"; cat "$work/read.log"; }
done

# Stopped at step 6, between outer steps, and resumed: the same bytes as the straight run (the
# mixture's too: its workers' biases parted at step 6 and were checkpointed each).
for model in gpt dit gpt-stream gpt-moe; do
  cfg=$here/tiny_${model%-*}.toml
  args=("${common[@]}")
  stop=6
  [ $model = gpt-moe ] && args+=("${moe[@]}")
  # Streaming, stopped after step 2: fragment 1's exchange (started after step 2) is in flight.
  [ $model = gpt-stream ] && args+=("${stream[@]}") && stop=2
  [ $model = dit ] && args=(--set train.steps=8 --set train.log_every=1 --set model.depth=2
    --set train.batch_size=8 --set sample.per_class=1 --set run.id=cmp --set lowcomm.method=diloco
    --set lowcomm.workers=2 --set lowcomm.inner_steps=4 --set lowcomm.compression=int8)
  run $model-straight 2 "$cfg" "${args[@]}" || fail "$model: straight run failed"
  run $model-resumed 2 "$cfg" "${args[@]}" --set train.stop_after=$stop || fail "$model: first part failed"
  run $model-resumed 2 "$cfg" "${args[@]}" --resume || fail "$model: resume failed"
  a=$work/$model-straight/tiny_${model%-*}/step-000008
  b=$work/$model-resumed/tiny_${model%-*}/step-000008
  for f in rank-00000.safetensors rank-00001.safetensors manifest.json; do
    cmp -s "$a/$f" "$b/$f" || fail "$model: resumed mid-phase, $f differs from the straight run"
  done
done
$py - "$work/gpt-moe-straight/tiny_gpt" "$work/gpt-moe-resumed/tiny_gpt" <<'PY' ||
import json, sys
straight, resumed = sys.argv[1], sys.argv[2]
six = json.load(open(resumed + "/step-000006/trainer_state.json"))["moe_selection_bias_workers"]
assert six[0] != six[1], "the workers' biases did not part during the round"
for run in (straight, resumed):
    eight = json.load(open(run + "/step-000008/trainer_state.json"))
    assert eight["moe_selection_bias_workers"][0] == eight["moe_selection_bias_workers"][1]
a, b = (json.load(open(r + "/step-000008/trainer_state.json"))["moe_selection_bias"]
        for r in (straight, resumed))
assert a == b, (a, b)
PY
  fail "gpt moe: the biases mid-round or after the resume are wrong"
[ $failures = 0 ] && echo "resumed between outer steps: bit-identical (gpt, dit, gpt streaming, gpt moe)"

# A worker killed between outer steps: `loom launch --max-restarts` restarts the job from the
# last checkpoint (one every H steps: at most H steps lost) and it ends where the straight run
# does.
LOOM_FAULT="kill:rank=1,step=7" "$loom" launch -n 2 --max-restarts 2 -- train "$gpt" "${common[@]}" \
  --set train.ckpt_every=4 --set run.out_dir="$work/killed" > "$work/killed.log" 2>&1 ||
  fail "the supervised run did not complete: $(tail -3 "$work/killed.log")"
grep -q "resumed from .*step-000004 at step 4" "$work/killed.log" ||
  fail "the restarted job did not resume from step 4"
for f in rank-00000.safetensors rank-00001.safetensors; do
  cmp -s "$work/gpt-straight/tiny_gpt/step-000008/$f" "$work/killed/tiny_gpt/step-000008/$f" ||
    fail "killed and restarted: $f differs from the straight run"
done
[ $failures = 0 ] && echo "a worker killed at step 7: restarted from step 4, ended bit-identical"

# Agreed a round later: worker 1's loss is NaN in steps 5-7 (3 skips in a row: a rollback due);
# both train on, worker 1 tells at the round's end (step 8), and at the next one (step 12) both
# roll back together to the newest checkpoint (step 8).
LOOM_FAULT="nan:rank=1,step=5;nan:rank=1,step=6;nan:rank=1,step=7" run rollback 2 "$gpt" \
  "${common[@]}" --set train.steps=16 --set train.ckpt_every=4 ||
  { fail "rollback: run failed"; tail -5 "$work/rollback.log"; }
$py - "$work/rollback/tiny_gpt" <<'PY' || fail "rollback: not agreed at the round's end"
import json, sys
run = sys.argv[1]
events = [json.loads(l) for l in open(f"{run}/events.jsonl")]
back = [e for e in events if e["event"] == "rollback"]
assert len(back) == 1 and back[0]["step"] == 12 and back[0]["checkpoint"].endswith("step-000008"), back
skipped = [[m["skipped_steps"] for m in map(json.loads, open(f"{run}/{f}")) if "loss" in m][-1]
           for f in ("metrics.jsonl", "logs/metrics-rank-1.jsonl")]
assert skipped == [0, 3], skipped
print("rollback: worker 1 skipped steps 5-7, both rolled back at step 12 to step 8")
PY

# SIGTERM to worker 1 alone in the middle of a round (H = 20, steps of 50 ms or more): both
# stop at a round's end with a checkpoint, and --resume auto ends bit-identical to the straight
# run.
P=("${common[@]}" --set train.steps=100 --set lowcomm.inner_steps=20 --set train.ckpt_every=0)
run pre-ref 2 "$gpt" "${P[@]}" || fail "preemption: the straight run failed"
LOOM_FAULT="sleep:rank=0,step=1,ms=50" "$mpirun" --oversubscribe -np 2 "$loom" train "$gpt" \
  "${P[@]}" --set run.out_dir="$work/pre" > "$work/pre.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ "$(awk '{print $2}' "$work/pre/tiny_gpt/logs/heartbeat-rank-0" 2>/dev/null)" -ge 6 ] 2>/dev/null && break
  sleep 0.1
done
rank1=$(pgrep -f "run.out_dir=$work/pre" | while read -r p; do
  tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$' && echo $p; done | head -1)
[ -n "$rank1" ] && kill -TERM "$rank1"
wait $pid
stopped=$(grep -o '"event":"preempted","step":[0-9]*' "$work/pre/tiny_gpt/events.jsonl" 2>/dev/null | grep -o '[0-9]*$')
if [ -n "$rank1" ] && [ -n "$stopped" ] && [ $((stopped % 20)) = 0 ] && [ "$stopped" -lt 100 ]; then
  run pre 2 "$gpt" "${P[@]}" --resume auto || fail "preemption: the resumed run failed"
  for f in rank-00000.safetensors rank-00001.safetensors; do
    cmp -s "$work/pre-ref/tiny_gpt/step-000100/$f" "$work/pre/tiny_gpt/step-000100/$f" ||
      fail "preemption: resumed $f differs from the straight run"
  done
  echo "SIGTERM to worker 1: both stopped at step $stopped (a round's end); resumed bit-identical"
else
  fail "preemption: rank1=$rank1 stopped at '$stopped': $(grep -m2 'preempted\|error' "$work/pre.log")"
fi

# expect NAME PATTERN NP ARGS...: the run fails with exit status 1 and PATTERN in its output.
expect() {
  local name=$1 pattern=$2
  shift 2
  run "$name" "$@"
  local code=$?
  [ $code = 1 ] || fail "$name: exit status $code, expected 1"
  grep -q -- "$pattern" "$work/$name.log" || { fail "$name: no '$pattern'"; cat "$work/$name.log"; }
}
expect bad-replicate "parallel.dp_replicate 4 and lowcomm.workers 2 differ" 1 "$gpt" "${common[@]}" \
  --set parallel.dp_replicate=4
expect bad-steps "train.steps 7 is not a multiple of lowcomm.inner_steps 4" 1 "$gpt" "${common[@]}" \
  --set train.steps=7
expect bad-batch "does not split evenly over 4 data-parallel ranks (2 DiLoCo workers x 2 each)" 4 \
  "$gpt" "${common[@]}" --set train.batch_size=6
expect bad-key "unknown key lowcomm.inner_steps" 1 "$gpt" --set lowcomm.inner_steps=4
expect bad-overlap "lowcomm.overlap_steps 2 must be in \[0, 2)" 1 "$gpt" "${common[@]}" \
  "${stream[@]}" --set lowcomm.overlap_steps=2
expect bad-fragments "lowcomm.inner_steps 4 must be a multiple of lowcomm.fragments 3" 1 "$gpt" \
  "${common[@]}" --set lowcomm.fragments=3
"$mpirun" --oversubscribe -np 1 "$loom" train "$gpt" "${common[@]}" --set run.out_dir="$work/two" : \
  -np 1 "$loom" train "$gpt" "${common[@]}" --set run.out_dir="$work/two" --set model.width=48 \
  > "$work/two-configs.log" 2>&1
grep -q "rank 1 was started with another config than rank 0" "$work/two-configs.log" ||
  { fail "ranks with different configs not refused"; cat "$work/two-configs.log"; }
# Another worker count: the 2-worker run's checkpoint of step 8 continued by 4 workers to step
# 12 (a config.toml edited to a constant schedule: 12 steps extend the run), worker m taking
# the checkpoint's worker m mod 2: it resumes at step 8, its first loss continues the 2 workers'
# (within 3% of their step-8 loss; a fresh start would sit near their first step's, further
# off), and it writes 4 workers' models.
cp -r "$work/gpt-none" "$work/regrown"
sed -i 's/^workers = 2$/workers = 4/; s/^schedule = .*/schedule = "constant"/' "$work/regrown/tiny_gpt/config.toml"
run regrown 4 "$gpt" "${common[@]}" --set lowcomm.workers=4 --set optim.schedule=\"constant\" \
  --set train.steps=12 --resume || { fail "2 workers resumed as 4: the run failed"; cat "$work/regrown.log"; }
grep -q "resumed from .*step-000008 at step 8" "$work/regrown.log" || fail "2 workers resumed as 4: not at step 8"
$py - "$work/gpt-none/tiny_gpt" "$work/regrown/tiny_gpt" <<'PY' || fail "2 workers resumed as 4: wrong continuation"
import json, sys
def losses(run):
    return {m["step"]: m["loss"] for m in map(json.loads, open(run + "/metrics.jsonl")) if "loss" in m}
two, four = losses(sys.argv[1]), losses(sys.argv[2])
print(f"2 workers: step 1 {two[1]:.4f}, step 8 {two[8]:.4f}; 4 workers from there: step 9 {four[9]:.4f}")
assert abs(four[9] - two[8]) < 0.03 * two[8] < two[1] - two[8], (two, four)
manifest = json.load(open(sys.argv[2] + "/step-000012/manifest.json"))
names = json.dumps(manifest)
assert all(f"worker{m}/model/" in names for m in (1, 2, 3)), "not 4 workers' models"
PY
[ $failures = 0 ] && echo "diloco: all checks passed"
exit $((failures > 0))
