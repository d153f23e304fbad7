#!/usr/bin/env bash
# In-memory checkpoints kept by buddies (resilience.memory_checkpoint_every, docs/resilience.md),
# on the tiny GPT, 4 ranks under ZeRO-2, a global batch of 8, 20 steps. LOOM_RANKS_PER_HOST=2
# puts ranks 0-1 and 2-3 on hosts of their own (<host>-0, <host>-1), so each rank's copy is
# kept on the other host; a lost host is its directory removed. Each restored run is compared
# with the uninterrupted run (compare_runs.py: every step's loss, the final weights and AdamW
# state, to 1e-5).
#  - a host lost: rank 2 killed at step 13, host 1's memory gone; the restart restores step 10
#    from memory, ranks 2 and 3 from the copies on host 0, and ends as the uninterrupted run;
#    at the end the run's copies are gone;
#  - under `loom launch --max-restarts`: the restart restores from memory by itself;
#  - a process lost, no host: every rank restores its own copy (step 9, newer than the disk
#    checkpoint of step 8);
#  - the disk checkpoint newer than the memory copies: restored from disk;
#  - rank 2's own copy gone and its buddy's damaged: the damaged copy is named, and every rank
#    restores from disk (here: none, so step 0);
#  - another world size: the copies are of another layout; the run restores from disk (here:
#    none, so step 0).
# Usage: memory_checkpoint_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
export LOOM_RANKS_PER_HOST=2
host=$(hostname)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
cfg=$here/tiny_gpt.toml
store=$work/shm
common=(--set run.id=mem --set train.steps=20 --set train.log_every=1 --set model.depth=2
  --set train.batch_size=8 --set eval.every=0 --set sample.tokens=0
  --set parallel.data_parallel=zero2 --set resilience.memory_store="\"$store\"")
copies=$store/loom-mem
same_as_ref() {
  /usr/bin/python3 "$here/compare_runs.py" "$work/ref/tiny_gpt" "$work/$1/tiny_gpt" 1e-5 \
    > "$work/$1.compare" 2>&1 && ok "$1: $(tail -1 "$work/$1.compare")" ||
    fail "$1 differs from the uninterrupted run: $(tail -2 "$work/$1.compare")"
}
# run NAME FAULT ARGS...: one attempt of the 4-rank job (no restart), its output in NAME.log.
run() {
  local name=$1 fault=$2; shift 2
  LOOM_FAULT=$fault "$loom" launch -n 4 -- train "$cfg" "${common[@]}" \
    --set run.out_dir="$work/$name" "$@" >> "$work/$name.log" 2>&1
}

"$loom" launch -n 4 -- train "$cfg" "${common[@]}" --set run.out_dir="$work/ref" \
  > "$work/ref.log" 2>&1 || fail "the uninterrupted run failed: $(tail -3 "$work/ref.log")"

# --- a host lost ---
run host "kill:rank=2,step=13" --set resilience.memory_checkpoint_every=5 &&
  fail "host: the run survived its fault"
[ -f "$copies/$host-1/own-00002-step-000010.bin" ] && [ -f "$copies/$host-0/held-00002-step-000010.bin" ] &&
  [ ! -e "$copies/$host-0/own-00000-step-000005.bin" ] &&
  ok "host: rank 2's copy of step 10 on host 1, its buddy's on host 0, step 5's gone" ||
  fail "host: the copies are $(cd "$store" && find . -type f | sort | tr '\n' ' ')"
rm -rf "${copies:?}/$host-1"
run host "" --set resilience.memory_checkpoint_every=5 --resume auto ||
  fail "host: the restart failed: $(tail -3 "$work/host.log")"
grep -q "memory checkpoint: restoring step 10 from memory (ranks 2, 3 from their buddies' copies)" "$work/host.log" &&
  grep -q "resumed from memory at step 10" "$work/host.log" &&
  ok "host: step 10 restored from memory, ranks 2 and 3 from host 0" ||
  fail "host: not restored from memory: $(grep -E 'memory|resumed' "$work/host.log")"
same_as_ref host
[ ! -e "$copies" ] && ok "host: the finished run's copies are gone" ||
  fail "host: left $(find "$store" -type f | head -3)"

# --- under the supervisor: loom launch --max-restarts restarts from memory by itself ---
LOOM_FAULT="kill:rank=3,step=13" "$loom" launch -n 4 --max-restarts 1 -- train "$cfg" "${common[@]}" \
  --set resilience.memory_checkpoint_every=5 --set run.out_dir="$work/supervised" \
  > "$work/supervised.log" 2>&1 || fail "supervised: the job did not complete: $(tail -3 "$work/supervised.log")"
grep -q "resumed from memory at step 10" "$work/supervised.log" &&
  ok "supervised: the restart resumed from memory at step 10 (no disk checkpoint yet)" ||
  fail "supervised: $(grep -E 'memory|resumed|resume auto' "$work/supervised.log")"
same_as_ref supervised

# --- a process lost: every rank its own copy, newer than the disk's ---
run proc "kill:rank=1,step=11" --set resilience.memory_checkpoint_every=3 --set train.ckpt_every=4
run proc "" --set resilience.memory_checkpoint_every=3 --set train.ckpt_every=4 --resume auto ||
  fail "proc: the restart failed: $(tail -3 "$work/proc.log")"
grep -q "memory checkpoint: restoring step 9 from memory (every rank its own copy)" "$work/proc.log" &&
  ok "proc: step 9 from memory, not step 8 from disk" ||
  fail "proc: $(grep -E 'memory|resumed' "$work/proc.log")"
same_as_ref proc

# --- the disk checkpoint newer ---
run disk "kill:rank=1,step=10" --set resilience.memory_checkpoint_every=6 --set train.ckpt_every=4
run disk "" --set resilience.memory_checkpoint_every=6 --set train.ckpt_every=4 --resume auto ||
  fail "disk: the restart failed: $(tail -3 "$work/disk.log")"
grep -q "resumed from $work/disk/tiny_gpt/step-000008 at step 8" "$work/disk.log" &&
  ! grep -q "restoring step" "$work/disk.log" && ok "disk: step 8 from disk (memory's is step 6)" ||
  fail "disk: $(grep -E 'memory|resumed' "$work/disk.log")"
same_as_ref disk

# --- both copies of rank 2 unusable ---
run both "kill:rank=2,step=13" --set resilience.memory_checkpoint_every=5
rm -rf "${copies:?}/$host-1"
held=$copies/$host-0/held-00002-step-000010.bin
printf '\x55' | dd of="$held" bs=1 seek=1000 conv=notrunc status=none
run both "" --set resilience.memory_checkpoint_every=5 --resume auto ||
  fail "both: the restart failed: $(tail -3 "$work/both.log")"
grep -q "memory checkpoint: $held: its bytes do not match their checksum" "$work/both.log" &&
  grep -q "memory checkpoint: a copy of step 10 failed its checks; none restored" "$work/both.log" &&
  ! grep -q "resumed from" "$work/both.log" &&
  ok "both: the damaged copy named and passed over, the run starts again from step 0" ||
  fail "both: $(grep -E 'memory|resumed' "$work/both.log")"
same_as_ref both

# --- another world size ---
run world "kill:rank=2,step=13" --set resilience.memory_checkpoint_every=5
LOOM_FAULT="" "$loom" launch -n 2 -- train "$cfg" "${common[@]}" --set run.out_dir="$work/world" \
  --set resilience.memory_checkpoint_every=5 --resume auto \
  >> "$work/world.log" 2>&1 || fail "world: the 2-process restart failed: $(tail -3 "$work/world.log")"
grep -q "memory checkpoint: none to restore (rank 0 has no copy of step 10 for its layout" "$work/world.log" &&
  ! grep -q "resumed from" "$work/world.log" &&
  ok "world: the 4-process copies not used by 2 processes (no disk checkpoint: step 0)" ||
  fail "world: $(grep -E 'memory|resumed' "$work/world.log")"

[ "$failures" -eq 0 ] && echo "memory checkpoints: all passed" ||
  { echo "memory checkpoints: $failures failed"; exit 1; }
