#!/usr/bin/env bash
# Elastic restarts under `loom launch --min-ranks` (docs/resilience.md), on the tiny GPT, 4 ranks
# under ZeRO-3, a global batch of 8, a checkpoint every 4 of 16 steps. Each run is compared with
# the uninterrupted 4-rank run (compare_runs.py: every step's loss and the final weights and
# AdamW state, to 1e-5): equal means every step saw the same 8 samples, none repeated or skipped.
#  - a rank lost for good (killed at step 7 in every attempt that has it): after its second
#    failure the job goes on with 2 processes (3 cannot split 8), 4 x 2 micro-batches;
#  - a rank slowed 6x is flagged as a straggler twice in a row and excluded: the run
#    checkpoints, exits 76, and goes on with 2 processes (4 processes share 2 cores here, so a
#    step of a few milliseconds can be descheduled: another rank flagged once is noise, not a
#    failure, but never twice in a row);
#  - one replica's weights corrupted (a flipped bit, DDP): the consistency check names it apart
#    from the majority, and the next attempt goes on without it;
#  - --regrow-after: on 2 processes the job is asked to checkpoint and stop, and the rank, back,
#    trains again in a 4-process attempt;
#  - DiLoCo: a worker lost goes on as fewer workers of the same layout, and rejoins after
#    --regrow-after;
#  - a hostfile: the lost rank's host is left out of the next attempt's hostfile (a wrapper
#    around mpirun records each attempt's hostfile and runs the job on this machine);
#  - no world at least --min-ranks splits the batch: the launcher gives up, saying why; the
#    options' misuses are refused.
# Usage: elastic_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
cfg=$here/tiny_gpt.toml
common=(--set run.id=cmp --set train.steps=16 --set train.log_every=1 --set model.depth=2
  --set train.batch_size=8 --set eval.every=0 --set sample.tokens=0 --set train.ckpt_every=4
  --set parallel.data_parallel=zero3)
events() { cat "$work/$1/tiny_gpt/events.jsonl" 2>/dev/null; }
same_as_ref() {
  /usr/bin/python3 "$here/compare_runs.py" "$work/ref/tiny_gpt" "$work/$1/tiny_gpt" 1e-5 \
    > "$work/$1.compare" 2>&1 && ok "$1: $(tail -1 "$work/$1.compare")" ||
    fail "$1 differs from the uninterrupted run: $(tail -2 "$work/$1.compare")"
}

"$loom" launch -n 4 -- train "$cfg" "${common[@]}" --set run.out_dir="$work/ref" > "$work/ref.log" 2>&1 ||
  fail "the uninterrupted 4-rank run failed: $(tail -3 "$work/ref.log")"

# --- a rank lost for good ---
LOOM_FAULT="kill:rank=3,step=7,attempt=*" "$loom" launch -n 4 --min-ranks 2 --max-restarts 3 -- \
  train "$cfg" "${common[@]}" --set run.out_dir="$work/lost" > "$work/lost.log" 2>&1 ||
  fail "lost: the job did not complete: $(tail -3 "$work/lost.log")"
events lost | grep -q '"event":"elastic","attempt":2,"left_out_rank":3,"host":"this machine","reason":"lost","evidence":{"failures":\["LOOM_FAULT: rank 3 kills itself at step 7","LOOM_FAULT: rank 3 kills itself at step 7"\]},"processes":2,"batch_size":4,"grad_accum":2' &&
  grep -q "resume: the global batch of 8 is kept: 8 x 1 -> 4 x 2" "$work/lost.log" &&
  ok "lost: rank 3 left out after failing twice, 2 processes of 4 x 2 (event with both failures)" ||
  fail "lost: no elastic event with the evidence: $(events lost | grep elastic)"
same_as_ref lost

# --- a straggler excluded ---
LOOM_FAULT="slow:rank=1,step=1,factor=6" "$loom" launch -n 4 --min-ranks 2 --max-restarts 2 -- \
  train "$cfg" "${common[@]}" --set run.out_dir="$work/slow" --set resilience.straggler_every=2 \
  --set resilience.straggler_factor=2 --set resilience.exclude_stragglers_after=2 \
  > "$work/slow.log" 2>&1 || fail "slow: the job did not complete: $(tail -3 "$work/slow.log")"
/usr/bin/python3 - "$work/slow/tiny_gpt/events.jsonl" <<'PY' && ok "slow: rank 1 excluded after 2 flags in a row (its evidence), 2 processes" || fail "slow: $(events slow | grep -v started)"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
exclude = [e for e in events if e["event"] == "exclude"]
elastic = [e for e in events if e["event"] == "elastic"]
assert len(exclude) == 1 and exclude[0]["rank"] == 1 and exclude[0]["reason"] == "straggler", exclude
flags = exclude[0]["evidence"]
assert len(flags) == 2 and all(f["rank"] == 1 and f["compute_s_per_step"] > 2 * f["others_median_s"] for f in flags), flags
assert len(elastic) == 1 and elastic[0]["left_out_rank"] == 1 and elastic[0]["processes"] == 2, elastic
before = events[:events.index(exclude[0])]
assert [e["step"] for e in before if e["event"] == "straggler" and e["rank"] == 1] == [2, 4], "rank 1 not flagged at both comparisons"
assert events[-1]["event"] == "completed"
PY
grep -q "exiting with status 76" "$work/slow.log" || fail "slow: no exit 76 said"
same_as_ref slow

# --- a replica apart from the majority (silent data corruption) ---
LOOM_FAULT="bitflip:rank=2,step=6" "$loom" launch -n 4 --min-ranks 2 --max-restarts 2 -- \
  train "$cfg" "${common[@]}" --set parallel.data_parallel=\"ddp\" --set resilience.consistency_every=3 \
  --set run.out_dir="$work/flip" > "$work/flip.log" 2>&1 ||
  fail "flip: the job did not complete: $(tail -3 "$work/flip.log")"
events flip | grep -q '"event":"elastic","attempt":1,"left_out_rank":2,"host":"this machine","reason":"replica_mismatch","evidence":{[^}]*"event":"replica_mismatch","step":6,"ranks":\[2\],"group":"dp"},"processes":2' &&
  ok "flip: rank 2 apart from the majority at step 6, left out (2 processes)" ||
  fail "flip: $(events flip | grep -v started)"
same_as_ref flip

# --- back again (--regrow-after) ---
LOOM_FAULT="kill:rank=3,step=7;kill:rank=3,step=7,attempt=1;sleep:rank=0,step=5,ms=400,attempt=2" \
  "$loom" launch -n 4 --min-ranks 2 --max-restarts 3 --regrow-after 3 -- train "$cfg" "${common[@]}" \
  --set run.out_dir="$work/regrow" > "$work/regrow.log" 2>&1 ||
  fail "regrow: the job did not complete: $(tail -3 "$work/regrow.log")"
events regrow | grep -q '"event":"regrow","attempt":3,"processes":4,"from_processes":2' &&
  grep -q "launch (attempt 3): .* -np 4 " "$work/regrow.log" &&
  grep -q "resume: the global batch of 8 is kept: 4 x 2 -> 8 x 1" "$work/regrow.log" &&
  ok "regrow: after 3 s on 2 processes, checkpointed and back on 4" ||
  fail "regrow: $(grep '^launch' "$work/regrow.log" | tail -3)"
same_as_ref regrow

# --- DiLoCo: a worker leaves and rejoins ---
# 4 workers of 1 process; rank 3 lost (killed in two attempts) -> 2 workers (3 cannot split 8)
# of the same layout, the outer step averaging over those present; after --regrow-after the 4
# train again, workers 2 and 3 continuing the state of workers 0 and 1 (m mod 2). Compared with
# the uninterrupted 4-worker run: every step's loss within 10% (other workers average other
# outer steps; the run must neither diverge nor restart from scratch).
diloco=(--set parallel.data_parallel=\"ddp\" --set lowcomm.method=\"diloco\" --set lowcomm.workers=4
  --set lowcomm.inner_steps=4)
"$loom" launch -n 4 -- train "$cfg" "${common[@]}" "${diloco[@]}" --set run.out_dir="$work/diloco_ref" \
  > "$work/diloco_ref.log" 2>&1 || fail "the uninterrupted DiLoCo run failed: $(tail -3 "$work/diloco_ref.log")"
LOOM_FAULT="kill:rank=3,step=7;kill:rank=3,step=7,attempt=1;sleep:rank=0,step=5,ms=400,attempt=2" \
  "$loom" launch -n 4 --min-ranks 1 --max-restarts 3 --regrow-after 3 -- train "$cfg" "${common[@]}" \
  "${diloco[@]}" --set run.out_dir="$work/diloco" > "$work/diloco.log" 2>&1 ||
  fail "diloco: the job did not complete: $(tail -3 "$work/diloco.log")"
events diloco | grep -q '"event":"elastic","attempt":2,"left_out_rank":3,.*"processes":2,"batch_size":4,"grad_accum":2,"workers":2' &&
  grep -q "launch (attempt 2): .* -np 2 .*--set lowcomm.workers=2 --set parallel.dp_replicate=2" "$work/diloco.log" &&
  grep -q "(2 DiLoCo workers of 4)" "$work/diloco.log" &&
  events diloco | grep -q '"event":"regrow","attempt":3,"processes":4,"from_processes":2' &&
  grep "launch (attempt 3): " "$work/diloco.log" | grep -q -- "-np 4 " &&
  ! grep "launch (attempt 3): " "$work/diloco.log" | grep -q "lowcomm.workers=2" &&
  grep -q "4 DiLoCo workers" "$work/diloco.log" &&
  ok "diloco: worker 3 lost, 2 workers went on, all 4 back after the regrow" ||
  fail "diloco: $(grep '^launch' "$work/diloco.log" | tail -4)"
/usr/bin/python3 - "$work/diloco_ref/tiny_gpt/metrics.jsonl" "$work/diloco/tiny_gpt/metrics.jsonl" <<'PY' &&
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "loss" in r: out[r["step"]] = r["loss"]  # a replayed step's last record
    return out
ref, got = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(got) == sorted(ref) == list(range(1, 17)), (sorted(ref), sorted(got))
worst = max(abs(got[s] - ref[s]) / ref[s] for s in ref)
assert worst < 0.10, f"a step's loss {worst:.1%} from the uninterrupted run's"
print(f"every step's loss within {worst:.2%} of the uninterrupted 4-worker run's")
PY
  ok "diloco: losses near the uninterrupted run's" || fail "diloco: losses apart from the uninterrupted run's"

# --- a hostfile: the lost rank's host is left out ---
printf "node-a slots=2\nnode-b slots=2\n" > "$work/hosts"
cat > "$work/mpirun" <<SH
#!/usr/bin/env bash
# Records the hostfile each attempt was given, then runs the job here without it.
args=()
while [ \$# -gt 0 ]; do
  if [ "\$1" = "--hostfile" ]; then echo "== \$2" >> "$work/hostfiles"; cat "\$2" >> "$work/hostfiles"; shift 2; continue; fi
  args+=("\$1"); shift
done
exec mpirun "\${args[@]}"
SH
chmod +x "$work/mpirun"
LOOM_MPIRUN="$work/mpirun" LOOM_FAULT="kill:rank=3,step=7,attempt=*" "$loom" launch -n 4 \
  --hostfile "$work/hosts" --min-ranks 1 --max-restarts 3 -- train "$cfg" "${common[@]}" \
  --set run.out_dir="$work/hostfile" > "$work/hostfile.log" 2>&1 ||
  fail "hostfile: the job did not complete: $(tail -3 "$work/hostfile.log")"
last=$(awk '/^== /{f=$2; body=""; next} {body=body $0 ";"} END{print f " " body}' "$work/hostfiles")
[ "$last" = "$work/hostfile/tiny_gpt/logs/hostfile-attempt-2 node-a slots=2;" ] &&
  events hostfile | grep -q '"left_out_rank":3,"host":"node-b","reason":"lost"' &&
  ok "hostfile: rank 3's host node-b left out (attempt 2: node-a slots=2)" ||
  fail "hostfile: the last attempt's hostfile is '$last'; $(events hostfile | grep elastic)"

# --- no smaller world splits the batch; misuse ---
LOOM_FAULT="kill:rank=3,step=3,attempt=*" "$loom" launch -n 4 --min-ranks 3 --max-restarts 3 -- \
  train "$cfg" "${common[@]}" --set run.out_dir="$work/none" > "$work/none.log" 2>&1 &&
  fail "none: the job completed without rank 3 on 3 processes"
grep -q "launch: rank 3 is lost, and the job cannot go on without it: no world of 3 to 3 processes splits the global batch of 8" "$work/none.log" &&
  events none | grep -q '"event":"gave_up"' && ok "none: gives up, saying why" ||
  fail "none: $(grep '^launch' "$work/none.log" | tail -2)"
expect_refused() {  # message, then the command
  local want=$1; shift
  "$@" > "$work/refused.log" 2>&1 && fail "accepted: $*"
  grep -q -- "$want" "$work/refused.log" && ok "refused: $want" ||
    fail "'$want' not said: $(tail -2 "$work/refused.log")"
}
expect_refused "--min-ranks: needs --max-restarts" "$loom" launch -n 4 --min-ranks 2 -- train "$cfg"
expect_refused "--regrow-after: needs --min-ranks" "$loom" launch -n 4 --max-restarts 1 --regrow-after 5 -- train "$cfg"
expect_refused "--min-ranks: 5 is more than -n 4" "$loom" launch -n 4 --min-ranks 5 --max-restarts 1 -- train "$cfg"

[ "$failures" -eq 0 ] && echo "elastic: all passed" || { echo "elastic: $failures failed"; exit 1; }
