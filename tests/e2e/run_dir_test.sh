#!/usr/bin/env bash
# Nothing lost (docs/resilience.md): the run directory's lifecycle, preemption, and input that
# must be refused. One numbered section per finding of the adversarial pass:
#   1 a fresh run into a used directory is refused (exit 3; the launcher does not restart it);
#     --overwrite moves the old run aside
#   2 step numbers from 1,000,000 on order and prune by the step inside, not by name
#   3 --resume without a usable `latest` falls back to the newest verified checkpoint, or stops
#   4 preemption: SIGTERM to a process, to one rank, to the launcher -> checkpoint, exit 75, no
#     process left, a bit-identical finish with --resume auto; a second signal harms nothing
#   5 a second run into a directory in use is refused by its lock
#   6 a run that cannot fit in memory is refused before it is built, naming the sizes
#   7 a directory, /dev/null or an empty file is no config
#   8 non-finite floats are refused, naming the key
#   9 `ckpt verify` checks what resume needs
#  10 a metrics write that fails stops the run, naming the file; a record cut mid-line (a crash,
#     a full disk) is dropped when the run resumes, never continued by the next one
#  11 another run's checkpoint where this run saves one is moved aside, never deleted
#  12 settings that a resumed run must keep are refused (exit 3), every difference named, the
#     run's config.toml untouched; train.steps extends a constant schedule, said in one line
#  13 other commands never write into a checkpoint or over a run directory's own files
#  14 one clear error each: run.name that is no directory name, a config of only comments, a
#     count beyond its bound, moe.every beyond the depth, a NaN on the command line, a launch
#     of 100000 processes or with a missing, empty or garbled hostfile
#  15 a signal after the last checkpoint (the final sampling) ends the run at once
#  16 threads: run.threads and OMP_NUM_THREADS set the count; with no wait policy in the
#     environment, cores busy with another process make idle threads sleep, said in the banner
# Usage: run_dir_test.sh LOOM MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
dit=$here/tiny_dit.toml
gpt=$here/tiny_gpt.toml
gptq=(--set eval.every=0 --set sample.tokens=0)
sums() { (cd "$1" && find . -type f ! -name .lock ! -path './logs/*' -print0 | sort -z | xargs -0 md5sum); }
# run_status WHAT EXPECTED_STATUS PATTERN -- command...: the status and one line matching.
expect() {
  local what=$1 want=$2 pattern=$3
  shift 4
  "$@" > "$work/out.log" 2> "$work/err.log"
  local got=$?
  if [ $got -ne "$want" ]; then fail "$what: exit status $got, expected $want: $(tail -2 "$work/err.log")"; return 1; fi
  if ! grep -q -- "$pattern" "$work/err.log"; then fail "$what: no '$pattern' in: $(cat "$work/err.log")"; return 1; fi
  ok "$what -> $(grep -m1 -- "$pattern" "$work/err.log" | cut -c1-170)"
}

# --- 1: a fresh run into a used directory ---
C=(--set run.out_dir="$work/one" --set train.ckpt_every=2 --set train.keep_checkpoints=2)
"$loom" train "$dit" "${C[@]}" --set train.steps=8 --set run.seed=3 > "$work/one.log" 2>&1 ||
  fail "1: the first run failed"
before=$(sums "$work/one/tiny_dit")
expect "1: fresh run into a used directory" 3 "already holds a run" -- \
  "$loom" train "$dit" "${C[@]}" --set train.steps=12 --set run.seed=7
LOOM_FAULT="kill:rank=0,step=5,attempt=0" "$loom" launch -n 1 --max-restarts 1 -- \
  train "$dit" "${C[@]}" --set train.steps=12 --set run.seed=7 > "$work/one-launch.log" 2>&1
status=$?
[ $status -eq 3 ] && grep -q "refused the job.*not restarting" "$work/one-launch.log" &&
  ! grep -q "resumed from" "$work/one-launch.log" &&
  ok "1: under launch --max-restarts: refused, not restarted (status 3)" ||
  fail "1: launch: status $status: $(grep -m2 'launch\|resumed' "$work/one-launch.log")"
[ "$(sums "$work/one/tiny_dit")" = "$before" ] && ok "1: the old run's files are unchanged" ||
  fail "1: the old run's files changed"
"$loom" train "$dit" "${C[@]}" --set train.steps=12 --set run.seed=7 --overwrite > "$work/one-ow.log" 2>&1 ||
  fail "1: --overwrite failed: $(tail -1 "$work/one-ow.log")"
aside=$(ls -d "$work/one/tiny_dit.overwritten-"* 2>/dev/null | head -1)
[ -n "$aside" ] && [ "$(sums "$aside")" = "$before" ] && [ -d "$work/one/tiny_dit/step-000012" ] &&
  ok "1: --overwrite moved the old run to $(basename "$aside") intact; the new run has step-000012" ||
  fail "1: --overwrite did not keep the old run aside"

# --- 2: step numbers from 1,000,000 on ---
R=$work/big/tiny_dit
"$loom" train "$dit" --set run.out_dir="$work/big" --set train.ckpt_every=2 --set train.steps=1000010 \
  --set train.stop_after=4 > "$work/big.log" 2>&1 || fail "2: the first run failed"
# A checkpoint of this run at step 999998: step-000004 with its trainer_state.json (and the
# manifest's checksums) rewritten.
/usr/bin/python3 - "$R" <<'EOF'
import json, os, shutil, sys, xxhash
run = sys.argv[1]
src, dst = os.path.join(run, "step-000004"), os.path.join(run, "step-999998")
shutil.copytree(src, dst)
state = json.load(open(os.path.join(dst, "trainer_state.json")))
state["step"] = 999998
text = json.dumps(state, indent=2) + "\n"
open(os.path.join(dst, "trainer_state.json"), "w").write(text)
manifest = json.load(open(os.path.join(dst, "manifest.json")))
manifest["files"]["trainer_state.json"]["xxh64"] = xxhash.xxh64(text.encode()).hexdigest()
mtext = json.dumps(manifest, indent=2) + "\n"
open(os.path.join(dst, "manifest.json"), "w").write(mtext)
open(os.path.join(dst, "manifest.xxh64"), "w").write(xxhash.xxh64(mtext.encode()).hexdigest() + "\n")
open(os.path.join(run, "latest"), "w").write("step-999998\n")
EOF
"$loom" train "$dit" --set run.out_dir="$work/big" --set train.ckpt_every=2 --set train.keep_checkpoints=2 \
  --set train.steps=1000010 --set train.stop_after=1000002 --resume > "$work/big2.log" 2>&1 ||
  fail "2: resuming at step 999998 failed: $(tail -1 "$work/big2.log")"
kept=$(ls "$R" | grep step- | tr '\n' ' ')
[ "$kept" = "step-1000000 step-1000002 " ] && [ "$(cat "$R/latest")" = step-1000002 ] &&
  ok "2: after step 1000002 (keep 2): $kept kept, latest names step-1000002" ||
  fail "2: after step 1000002 (keep 2): latest=$(cat "$R/latest"), kept $kept"
rm "$R/latest"
"$loom" train "$dit" --set run.out_dir="$work/big" --set train.steps=1000010 --set train.stop_after=1000003 \
  --resume auto > "$work/big3.log" 2>&1
grep -q "resumed from .*step-1000002 at step 1000002" "$work/big3.log" &&
  ok "2: --resume auto picks step-1000002, the newest" ||
  fail "2: --resume auto: $(grep -m1 'resumed\|error' "$work/big3.log")"

# --- 3: --resume without a usable latest ---
R3=$work/three/tiny_dit
"$loom" train "$dit" --set run.out_dir="$work/three" --set train.ckpt_every=2 --set train.keep_checkpoints=5 \
  --set train.stop_after=4 > "$work/three.log" 2>&1 || fail "3: the first run failed"
for bad in missing dangling empty garbage; do
  case $bad in
    missing) rm -f "$R3/latest" ;;
    dangling) echo step-000099 > "$R3/latest" ;;
    empty) : > "$R3/latest" ;;
    garbage) printf '\x00\x01../../etc\n' > "$R3/latest" ;;
  esac
  before=$(ls "$R3" | grep step- | tr '\n' ' ')
  "$loom" train "$dit" --set run.out_dir="$work/three" --set train.ckpt_every=2 --set train.keep_checkpoints=5 \
    --set train.stop_after=5 --resume > "$work/three-$bad.log" 2>&1
  grep -q "resumed from .*step-000004 at step 4" "$work/three-$bad.log" &&
    grep -q "newest verified checkpoint of the run instead" "$work/three-$bad.log" &&
    ok "3: $bad latest: fell back to step-000004 ($(grep -m1 '^resume:' "$work/three-$bad.log" | cut -c1-90)...)" ||
    fail "3: $bad latest: $(grep -m2 'resume\|error' "$work/three-$bad.log")"
  rm -rf "$R3/step-000005"  # the next case starts from the same checkpoints
done
mkdir -p "$work/three-none/tiny_dit" && cp "$R3/config.toml" "$work/three-none/tiny_dit/"
expect "3: --resume of a run with no checkpoint" 3 "has no checkpoint yet" -- \
  "$loom" train "$dit" --set run.out_dir="$work/three-none" --resume
expect "3: --resume of an empty directory" 3 "holds no run to continue" -- \
  "$loom" train "$dit" --set run.out_dir="$work/three-nothing" --resume

# --- 4: preemption ---
# 60 steps of 30 ms or more each; the signal comes once step 10 has begun.
P=(--set train.steps=60 --set train.ckpt_every=20 --set run.id=cmp "${gptq[@]}")
slow="sleep:rank=0,step=1,ms=30"
wait_step() {  # wait_step RUN_DIR N: until a heartbeat says step >= N (at most 60 s)
  for _ in $(seq 600); do
    for f in "$1"/logs/heartbeat-rank-*; do
      [ -f "$f" ] && [ "$(awk '{print $2}' "$f" 2>/dev/null)" -ge "$2" ] 2>/dev/null && return 0
    done
    sleep 0.1
  done
  return 1
}
"$loom" train "$gpt" "${P[@]}" --set run.out_dir="$work/pre-ref" > "$work/pre-ref.log" 2>&1 ||
  fail "4: the uninterrupted run failed"
# a) one process, SIGTERM (and a second one at once, during the save)
LOOM_FAULT=$slow "$loom" train "$gpt" "${P[@]}" --set run.out_dir="$work/pre1" > "$work/pre1.log" 2>&1 &
pid=$!
wait_step "$work/pre1/tiny_gpt" 10 || fail "4a: the run did not reach step 10"
kill -TERM $pid; sleep 0.05; kill -TERM $pid 2>/dev/null
wait $pid
status=$?
stopped=$(grep -o '"event":"preempted","step":[0-9]*' "$work/pre1/tiny_gpt/events.jsonl" | grep -o '[0-9]*$')
[ $status -eq 75 ] && [ -n "$stopped" ] && "$loom" ckpt verify "$work/pre1/tiny_gpt" > /dev/null 2>&1 &&
  ok "4a: SIGTERM twice: exit 75, checkpoint of step $stopped verified, event logged" ||
  fail "4a: status $status, preempted at '${stopped}': $(tail -2 "$work/pre1.log")"
"$loom" train "$gpt" "${P[@]}" --set run.out_dir="$work/pre1" --resume auto > "$work/pre1b.log" 2>&1 ||
  fail "4a: the requeued run failed"
cmp -s "$work/pre-ref/tiny_gpt/step-000060/rank-00000.safetensors" "$work/pre1/tiny_gpt/step-000060/rank-00000.safetensors" &&
  ok "4a: requeued with --resume auto: step 60 bitwise equal to the uninterrupted run" ||
  fail "4a: the requeued run's step 60 differs"
# b) SIGTERM to the supervising launcher of a 2-rank job
"$loom" launch -n 2 -- train "$gpt" "${P[@]}" --set run.out_dir="$work/pre-ref2" > "$work/pre-ref2.log" 2>&1 ||
  fail "4b: the uninterrupted 2-rank run failed"
LOOM_FAULT=$slow "$loom" launch -n 2 --max-restarts 3 -- train "$gpt" "${P[@]}" \
  --set run.out_dir="$work/pre2" > "$work/pre2.log" 2>&1 &
pid=$!
wait_step "$work/pre2/tiny_gpt" 10 || fail "4b: the job did not reach step 10"
kill -TERM $pid
wait $pid
status=$?
sleep 1
left=$(pgrep -f "run.out_dir=$work/pre2" | wc -l)
[ $status -eq 75 ] && [ "$left" -eq 0 ] && ! grep -q '"event":"restart"' "$work/pre2/tiny_gpt/events.jsonl" &&
  ok "4b: SIGTERM to launch --max-restarts: exit 75, not restarted, no process of the job left" ||
  fail "4b: status $status, $left processes left: $(grep -m2 'launch:' "$work/pre2.log")"
"$loom" launch -n 2 -- train "$gpt" "${P[@]}" --set run.out_dir="$work/pre2" --resume auto > "$work/pre2b.log" 2>&1 ||
  fail "4b: the requeued job failed"
same=1
for f in rank-00000.safetensors rank-00001.safetensors; do
  cmp -s "$work/pre-ref2/tiny_gpt/step-000060/$f" "$work/pre2/tiny_gpt/step-000060/$f" || { same=0; fail "4b: requeued $f differs"; }
done
[ $same = 1 ] && ok "4b: requeued job bitwise equal to the uninterrupted one at step 60"
# c) SIGTERM to one rank of an mpirun job: every rank stops together
LOOM_FAULT=$slow "$mpirun" --oversubscribe -np 2 "$loom" train "$gpt" "${P[@]}" \
  --set run.out_dir="$work/pre3" > "$work/pre3.log" 2>&1 &
pid=$!
wait_step "$work/pre3/tiny_gpt" 10 || fail "4c: the job did not reach step 10"
rank1=$(pgrep -f "run.out_dir=$work/pre3" | while read -r p; do
  [ "$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -c '^OMPI_COMM_WORLD_RANK=1$')" = 1 ] && echo $p; done | head -1)
[ -n "$rank1" ] && kill -TERM "$rank1"
wait $pid
status=$?
[ -n "$rank1" ] && [ $status -ne 0 ] && grep -q '"event":"preempted"' "$work/pre3/tiny_gpt/events.jsonl" &&
  [ "$(grep -c 'loom: preempted' "$work/pre3.log")" = 2 ] &&
  ok "4c: SIGTERM to rank 1 alone: both ranks checkpointed and stopped (mpirun status $status)" ||
  fail "4c: rank1=$rank1 status $status: $(grep -m2 'preempted\|error' "$work/pre3.log")"

# --- 5: two runs into one directory at once ---
LOOM_FAULT=$slow "$loom" train "$gpt" "${gptq[@]}" --set train.steps=100000 --set run.out_dir="$work/five" \
  > "$work/five-a.log" 2>&1 &
pid=$!
wait_step "$work/five/tiny_gpt" 2 || fail "5: the first run did not start"
conf=$(md5sum < "$work/five/tiny_gpt/config.toml")
expect "5: a second fresh run into a directory in use" 3 "in use by another run (pid $pid" -- \
  "$loom" train "$gpt" "${gptq[@]}" --set run.out_dir="$work/five" --overwrite
expect "5: a --resume into a directory in use" 3 "in use by another run" -- \
  "$loom" train "$gpt" "${gptq[@]}" --set run.out_dir="$work/five" --resume auto
[ "$(md5sum < "$work/five/tiny_gpt/config.toml")" = "$conf" ] && ok "5: the running run's config.toml is its own" ||
  fail "5: config.toml changed under the running run"
kill -TERM $pid; wait $pid

# --- 6: memory ---
expect "6: a model beyond run.memory_limit_mb" 1 "cannot fit.*run.memory_limit_mb" -- \
  timeout 20 "$loom" train "$dit" --set run.out_dir="$work/six" --set model.width=8192 --set model.depth=48 \
  --set model.heads=64 --set run.memory_limit_mb=2000
expect "6: a batch beyond the machine" 1 "cannot fit.*batch of 1000000000000" -- \
  timeout 20 "$loom" train "$dit" --set run.out_dir="$work/six" --set train.batch_size=1000000000000
# (its state fits the lower bound; with the data and the buffers of the step it does not)
expect "6: the limit while the model is built" 1 "memory limit of 400 MB exceeded.*tensor of shape" -- \
  timeout 20 "$loom" train "$dit" --set run.out_dir="$work/six" --set model.width=512 --set model.heads=8 \
  --set model.depth=4 --set run.memory_limit_mb=400

# --- 7: not a config ---
: > "$work/empty.toml"
expect "7: a directory as the config" 1 "is not a regular file" -- "$loom" train "$work"
expect "7: /dev/null as the config" 1 "is not a regular file" -- "$loom" train /dev/null
expect "7: an empty config" 1 "is empty" -- "$loom" train "$work/empty.toml"

# --- 8: non-finite floats ---
for kv in optim.lr=inf optim.eps=inf optim.weight_decay=inf train.grad_clip=nan sample.cfg_scale=nan; do
  expect "8: $kv" 1 "${kv%%=*} must be a finite number" -- "$loom" train "$dit" --set run.out_dir="$work/eight" --set "$kv"
done

# --- 9: ckpt verify checks what resume needs ---
"$loom" train "$dit" --set run.out_dir="$work/nine" > /dev/null 2>&1 || fail "9: the run failed"
N=$work/nine/tiny_dit
"$loom" ckpt verify "$N" > /dev/null 2>&1 || fail "9: an intact checkpoint was refused"
rehash() { /usr/bin/python3 -c 'import sys, xxhash; print(xxhash.xxh64(open(sys.argv[1], "rb").read()).hexdigest())' "$1/manifest.json" > "$1/manifest.xxh64"; }
edit_manifest() {  # edit_manifest DIR PYTHON_STATEMENT (on m)
  /usr/bin/python3 -c "import json, sys; m = json.load(open(sys.argv[1])); $2; json.dump(m, open(sys.argv[1], 'w'), indent=2)" "$1/manifest.json"
}
for damage in no-manifest transposed-rehashed transposed removed-rehashed; do
  c=$work/nine-$damage/tiny_dit
  rm -rf "$work/nine-$damage" && cp -r "$work/nine" "$work/nine-$damage"
  s=$c/step-000006
  case $damage in
    no-manifest) rm "$s/manifest.json"; want="has no manifest.json" ;;
    transposed-rehashed) edit_manifest "$s" 'm["tensors"]["model/patch_embed.weight"]["shape"].reverse()'; rehash "$s"
      want="tensor model/patch_embed.weight has shape (49, 32), the model of" ;;
    transposed) edit_manifest "$s" 'm["tensors"]["model/patch_embed.weight"]["shape"].reverse()'
      want="manifest.json does not match its checksum" ;;
    removed-rehashed) edit_manifest "$s" 'del m["tensors"]["ema/final.linear.bias"]'; rehash "$s"
      want="has no tensor ema/final.linear.bias" ;;
  esac
  expect "9: ckpt verify, $damage" 1 "$want" -- "$loom" ckpt verify "$c"
done

# --- 10: a metrics write that fails ---
"$loom" train "$dit" --set run.out_dir="$work/ten" --set train.stop_after=3 > /dev/null 2>&1 || fail "10: the run failed"
rm "$work/ten/tiny_dit/metrics.jsonl" && ln -s /dev/full "$work/ten/tiny_dit/metrics.jsonl"
expect "10: metrics.jsonl on a full disk" 1 "cannot write .*metrics.jsonl: No space left on device" -- \
  "$loom" train "$dit" --set run.out_dir="$work/ten" --resume
T=$work/ten/tiny_dit
rm "$T/metrics.jsonl" && printf '{"step": 1, "loss": 0.5}\n{"step": 2, "lo' > "$T/metrics.jsonl"
"$loom" train "$dit" --set run.out_dir="$work/ten" --resume > "$work/ten.log" 2>&1 ||
  fail "10: the resumed run after a cut record failed: $(tail -2 "$work/ten.log")"
/usr/bin/python3 -c '
import json, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "the file does not end with a whole line"
steps = [json.loads(l)["step"] for l in lines[:-1]]
assert steps[0] == 1 and steps[1] > 3, steps' "$T/metrics.jsonl" 2> "$work/ten.py" &&
  "$loom" report "$T" --out "$work/ten.html" > /dev/null 2>&1 &&
  ok "10: a cut last record is dropped on --resume; every line parses; loom report reads the file" ||
  fail "10: after a cut record: $(tail -1 "$work/ten.py")"

# --- 11: another run's checkpoint in the way ---
E=(--set run.out_dir="$work/eleven" --set train.steps=12 --set train.ckpt_every=4)
"$loom" train "$dit" "${E[@]}" --set train.stop_after=4 > /dev/null 2>&1 || fail "11: the run failed"
cp -r "$work/one/tiny_dit/step-000012" "$work/eleven/tiny_dit/step-000012"
foreign=$(sums "$work/eleven/tiny_dit/step-000012")
expect "11: another run's step-000012 in the way" 0 "is not a checkpoint of run .* not deleted" -- \
  "$loom" train "$dit" "${E[@]}" --resume
[ "$(sums "$work/eleven/tiny_dit/set-aside-step-000012-1")" = "$foreign" ] &&
  "$loom" ckpt verify "$work/eleven/tiny_dit/step-000012" > /dev/null 2>&1 &&
  ok "11: the other run's checkpoint kept intact beside this run's own step-000012" ||
  fail "11: the other run's checkpoint was not kept intact"

# --- 12: what a resumed run may change ---
W=(--set run.out_dir="$work/twelve" --set train.ckpt_every=4 --set optim.schedule=\"constant\")
"$loom" train "$dit" "${W[@]}" --set train.steps=8 --set train.stop_after=4 > /dev/null 2>&1 ||
  fail "12: the run failed"
conf=$(md5sum < "$work/twelve/tiny_dit/config.toml")
expect "12: another optimizer and seed" 3 "optim.lr: 0.001 -> 0.002; run.seed: 3 -> 9" -- \
  "$loom" train "$dit" "${W[@]}" --set train.steps=8 --set optim.lr=0.002 --set run.seed=9 --resume
expect "12: another schedule" 3 "optim.schedule: 'constant' -> 'cosine'" -- \
  "$loom" train "$dit" --set run.out_dir="$work/twelve" --set train.steps=8 --resume
[ "$(md5sum < "$work/twelve/tiny_dit/config.toml")" = "$conf" ] && ok "12: config.toml untouched" ||
  fail "12: a refused resume changed config.toml"
"$loom" train "$dit" "${W[@]}" --set train.steps=12 --set train.log_every=1 --set eval.every=0 \
  --resume > "$work/twelve.log" 2>&1 &&
  grep -q "resume: the run is extended, train.steps: 8 -> 12" "$work/twelve.log" &&
  [ -d "$work/twelve/tiny_dit/step-000012" ] &&
  ok "12: train.steps 8 -> 12 with a constant schedule: extended, said, trained to step 12" ||
  fail "12: extending train.steps: $(grep -m1 'resume\|error' "$work/twelve.log")"
C2=(--set run.out_dir="$work/twelve-cos" --set train.ckpt_every=4)
"$loom" train "$dit" "${C2[@]}" --set train.steps=8 --set train.stop_after=4 > /dev/null 2>&1
expect "12: train.steps under a cosine schedule" 3 "train.steps: 8 -> 12 (the 'cosine' schedule" -- \
  "$loom" train "$dit" "${C2[@]}" --set train.steps=12 --resume
# The step's batch regrouped (batch_size x grad_accum kept) resumes; another global batch does not.
expect "12: another global batch" 3 "train.batch_size: 8 -> 4" -- \
  "$loom" train "$dit" "${C2[@]}" --set train.steps=8 --set train.batch_size=4 --resume
"$loom" train "$dit" "${C2[@]}" --set train.steps=8 --set train.batch_size=4 \
  --set train.grad_accum=2 --resume > "$work/twelve-regroup.log" 2>&1 &&
  grep -q "resume: the global batch of 8 is kept: 8 x 1 -> 4 x 2" "$work/twelve-regroup.log" &&
  [ -d "$work/twelve-cos/tiny_dit/step-000008" ] &&
  ok "12: 8 x 1 regrouped into 4 x 2: said, trained to step 8" ||
  fail "12: regrouping the batch: $(grep -m1 'resume\|error' "$work/twelve-regroup.log")"

# --- 13: what other commands may write ---
N=$work/nine/tiny_dit
before=$(sums "$N")
expect "13: export onto a checkpoint's shard" 1 "step-000006 is a checkpoint; write elsewhere" -- \
  "$loom" ckpt export "$N/step-000006" "$N/step-000006/rank-00000.safetensors"
expect "13: export onto latest" 1 "latest is one of the files of the run directory" -- \
  "$loom" ckpt export "$N/step-000006" "$N/latest"
expect "13: an hf export into the run directory" 1 "tiny_dit is a run directory; write elsewhere" -- \
  "$loom" ckpt export "$N" "$N" --format hf
expect "13: a sample grid over config.toml" 1 "config.toml is one of the files of the run directory" -- \
  "$loom" sample "$N" --steps 2 --png "$N/config.toml"
[ "$(sums "$N")" = "$before" ] && "$loom" ckpt verify "$N" > /dev/null 2>&1 &&
  ok "13: the run directory is unchanged and its checkpoint verifies" ||
  fail "13: the refused commands changed the run directory"
"$loom" ckpt export "$N/step-000006" "$N/model.safetensors" > /dev/null 2>&1 &&
  ok "13: an export to a new name beside the run's files is written" ||
  fail "13: an export to a new name in the run directory was refused"

# --- 14: one clear error each ---
F=(--set run.out_dir="$work/fourteen/runs")
expect "14: run.name empty" 1 "run.name '' must be one directory name" -- \
  "$loom" train "$dit" "${F[@]}" --set 'run.name=""'
expect "14: run.name .." 1 "run.name '..' must be one directory name" -- \
  "$loom" train "$dit" "${F[@]}" --set 'run.name=".."'
[ ! -e "$work/fourteen" ] && ok "14: nothing written for a refused run.name" || fail "14: files written"
printf '  \n# the settings come later\n\n' > "$work/comments.toml"
expect "14: a config of blanks and comments" 1 "is empty (no settings in it)" -- \
  "$loom" train "$work/comments.toml"
expect "14: train.grad_accum = 10^12" 1 "train.grad_accum must be at most 65536, got 1000000000000" -- \
  timeout 20 "$loom" train "$dit" "${F[@]}" --set train.grad_accum=1000000000000
expect "14: sample.steps = 10^9" 1 "sample.steps must be at most 10000" -- \
  timeout 20 "$loom" train "$dit" "${F[@]}" --set sample.steps=1000000000
expect "14: moe.every beyond model.depth" 1 "moe.every 5 is more than model.depth 1" -- \
  "$loom" train "$gpt" "${F[@]}" --set moe.experts=4 --set moe.hidden=16 --set moe.every=5
expect "14: sample --cfg nan" 2 "'nan' is not a finite number" -- "$loom" sample "$N" --cfg nan
expect "14: sample --steps 10^12" 2 "'1000000000000' is more than 2147483647" -- \
  "$loom" sample "$N" --steps 1000000000000
expect "14: launch -n 100000" 1 "-n 100000 is more than 16 processes per slot" -- \
  timeout 20 "$loom" launch -n 100000 -- train "$dit" "${F[@]}"
: > "$work/hosts-empty"
printf 'node1 slots=two\n' > "$work/hosts-garbled"
for h in missing empty garbled; do
  case $h in
    missing) want="hostfile $work/hosts-missing: no such file" ;;
    empty) want="hostfile $work/hosts-empty names no host" ;;
    garbled) want="line 1: 'slots=two' is not slots=N" ;;
  esac
  expect "14: launch --hostfile, $h" 1 "$want" -- \
    timeout 20 "$loom" launch -n 2 --hostfile "$work/hosts-$h" -- train "$dit" "${F[@]}"
done

# --- 15: a signal during the final sampling ---
S=(--set run.out_dir="$work/fifteen" --set train.steps=4 --set train.ckpt_every=4
   --set sample.steps=10000 --set sample.per_class=100)
"$loom" train "$dit" "${S[@]}" > "$work/fifteen.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  [ "$(cat "$work/fifteen/tiny_dit/latest" 2> /dev/null)" = step-000004 ] && break
  sleep 0.1
done
sleep 1
t0=$(date +%s%N)
kill -TERM $pid
for _ in $(seq 100); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
kill -0 $pid 2> /dev/null && { kill -KILL $pid; fail "15: SIGTERM during the final sampling was ignored"; }
wait $pid
status=$?
took=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $status -eq 143 ] && "$loom" ckpt verify "$work/fifteen/tiny_dit" > /dev/null 2>&1 &&
  ok "15: SIGTERM during the final sampling ended the run in ${took} ms (status 143); step 4 verifies" ||
  fail "15: status $status after SIGTERM during the final sampling"

# --- 16: threads ---
T16=(--set run.out_dir="$work/sixteen" --set train.steps=1 --set sample.per_class=1 --overwrite)
banner() { grep -m1 "threads (" "$work/sixteen.log"; }
env -u OMP_NUM_THREADS "$loom" train "$dit" "${T16[@]}" --set run.threads=3 > "$work/sixteen.log" 2>&1
banner | grep -q " 3 threads (" && ok "16: run.threads = 3: $(banner)" ||
  fail "16: run.threads: $(banner)"
OMP_NUM_THREADS=2 "$loom" train "$dit" "${T16[@]}" > "$work/sixteen.log" 2>&1
banner | grep -q " 2 threads" && ok "16: OMP_NUM_THREADS=2: 2 threads" || fail "16: OMP_NUM_THREADS: $(banner)"
( while :; do :; done ) &
spinner=$!
sleep 0.5
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$loom" train "$dit" "${T16[@]}" > "$work/sixteen.log" 2>&1
kill $spinner
banner | grep -q "idle threads sleep: cores shared, [0-9.]* busy with other work" &&
  ok "16: beside a busy process: $(banner | grep -o 'idle threads sleep[^)]*')" ||
  fail "16: beside a busy process: $(banner)"
expect "16: run.threads = -1" 1 "run.threads must be >= 0" -- \
  "$loom" train "$dit" "${T16[@]}" --set run.threads=-1

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "run directory: all checks passed"
