#!/usr/bin/env bash
# End-to-end checks of the `loom` CLI on the tiny DiT config:
#   - a run of 2N steps equals a run of N steps + --resume + N steps, bit for bit;
#   - bad input ends with one clear error line and exit status 1, never a crash.
# Usage: cli_test.sh LOOM_BINARY WORK_DIR
set -euo pipefail
loom=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
cfg=$here/tiny_dit.toml
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# --- resume is bit-identical ---
# The compared runs share one run id: it is recorded in every checkpoint (trainer_state.json).
id=(--set run.id=cmp)
"$loom" train "$cfg" "${id[@]}" --set run.out_dir="$work/a" > "$work/a.log"
"$loom" train "$cfg" "${id[@]}" --set run.out_dir="$work/b" --set train.stop_after=3 > "$work/b1.log"
"$loom" train "$cfg" --set run.out_dir="$work/b" --resume > "$work/b2.log"
grep -q "resumed from .*step-000003 at step 3" "$work/b2.log" || fail "second run did not resume at step 3"
# The rank file holds every tensor (model, EMA, optimizer); the manifest their checksums.
for f in rank-00000.safetensors manifest.json; do
  if cmp -s "$work/a/tiny_dit/step-000006/$f" "$work/b/tiny_dit/step-000006/$f"; then
    echo "ok: $f identical after 6 steps and after 3 + resume + 3"
  else
    fail "$f differs between the uninterrupted and the resumed run"
  fi
done
[ -s "$work/a/tiny_dit/samples.png" ] || fail "no samples.png"
# --- the held-out flow-matching loss (test split) at the end and every eval.every steps: the
# objective the training loss measures, on other images with their own draws, so after these
# few steps it lies within 25% of the last training losses ---
"$loom" train "$cfg" --set run.out_dir="$work/v" --set eval.every=3 --set eval.val_images=500 \
  > "$work/v.log" 2>&1 || fail "training with eval.every: $(tail -2 "$work/v.log")"
/usr/bin/python3 - "$work/v/tiny_dit/metrics.jsonl" "$work/v.log" <<'PY' || fail "DiT held-out loss"
import json, re, sys
m = [x for x in map(json.loads, open(sys.argv[1])) if "loss" in x]  # step records
val = [x["val"]["loss"] for x in m if "val" in x]
assert len(val) == 2, f"expected held-out losses at steps 3 and 6, got {val}"
final = float(re.search(r"final held-out loss at step 6: ([0-9.]+) \(500 test images\)", open(sys.argv[2]).read()).group(1))
assert abs(final - val[-1]) < 1e-5, (final, val)
train = sum(x["loss"] for x in m[-2:]) / 2
assert abs(final - train) < 0.25 * train, (final, train)
print(f"ok: DiT held-out loss {final:.4f} (training loss {train:.4f})")
PY
[ "$(wc -l < "$work/a/tiny_dit/metrics.jsonl")" -ge 3 ] || fail "metrics.jsonl too short"

# --- sample from a checkpoint, as PNG and .npy ---
"$loom" sample "$work/a/tiny_dit/step-000006" --per-class 2 --steps 2 --png "$work/s.png" --npy "$work/s" > /dev/null
[ -s "$work/s.png" ] && [ -s "$work/s_images.npy" ] && [ -s "$work/s_labels.npy" ] || fail "loom sample wrote no files"
# One class alone: a row of it, every label that class; a class the model lacks is refused.
"$loom" sample "$work/a/tiny_dit/step-000006" --class 3 --per-class 4 --steps 2 --npy "$work/c3" --png "$work/c3.png" > /dev/null
/usr/bin/python3 - "$work/c3_labels.npy" "$work/c3_images.npy" <<'PY' || fail "loom sample --class 3"
import sys
import numpy as np
labels, images = np.load(sys.argv[1]), np.load(sys.argv[2])
assert labels.tolist() == [3, 3, 3, 3], labels
assert images.shape[0] == 4, images.shape
print("ok: loom sample --class 3 drew 4 images of class 3")
PY
out=$("$loom" sample "$work/a/tiny_dit/step-000006" --class 10 --steps 1 --png "$work/c10.png" 2>&1) && fail "--class 10 accepted"
grep -q "sample: --class 10 is not one of the model's classes (0..9)" <<< "$out" || fail "--class 10: $out"

# --- evaluation with the shipped classifier: class accuracy and FID with its floor; run from
# another directory, the default classifier (assets/fmnist_classifier) is the installation's,
# and the figures go to the run's eval.json (or --out), never into the checkpoint ---
repo=$(cd "$here/../.." && pwd)
(cd "$work" && "$loom" eval a/tiny_dit/step-000006 --samples 50 --steps 2) > "$work/eval.log" 2>&1 ||
  fail "loom eval from another directory: $(tail -1 "$work/eval.log")"
grep -q "class accuracy .* FID .* real-data floor .* -> .*a/tiny_dit/eval-step-000006.json" "$work/eval.log" || fail "loom eval printed no metrics: $(cat "$work/eval.log")"
grep -q "\"classifier\": \"$repo/assets/fmnist_classifier\"" "$work/a/tiny_dit/eval-step-000006.json" || fail "no eval.json in the run directory naming the installation's classifier"
[ ! -e "$work/a/tiny_dit/step-000006/eval.json" ] || fail "eval.json written into the checkpoint"
"$loom" eval "$work/a/tiny_dit" --samples 20 --steps 1 --out "$work/dit_eval.json" > /dev/null &&
  grep -q '"samples": 20' "$work/dit_eval.json" || fail "loom eval --out"
# The same evaluation at the end of training (eval.classifier), into the run's eval.json.
"$loom" train "$cfg" --set run.out_dir="$work/e" --set train.steps=2 --set eval.num_samples=20 \
  --set eval.classifier="\"$repo/assets/fmnist_classifier\"" > "$work/e.log" 2>&1 ||
  fail "training with eval.classifier: $(tail -2 "$work/e.log")"
grep -q "^eval: class accuracy .* FID .*real-data floor" "$work/e.log" || fail "no evaluation at the end of training"
for key in '"step": 2' '"fid"' '"fid_floor"' '"class_accuracy"' '"images_per_second"' '"val_loss"'; do
  grep -q "$key" "$work/e/tiny_dit/eval.json" 2>/dev/null || fail "the run's eval.json lacks $key"
done

# --- every command has --help: its synopsis on stdout, exit status 0 ---
for c in train sample eval tokenizer ckpt launch bench version; do
  if "$loom" $c --help > "$work/help.log" 2>&1 && grep -q "^usage: loom $c" "$work/help.log" &&
     grep -q "^  $c" "$work/help.log"; then :; else fail "loom $c --help: $(head -2 "$work/help.log")"; fi
done
"$loom" --help > "$work/help.log" 2>&1 && grep -q "^  launch -n N" "$work/help.log" &&
  echo "ok: loom --help and loom COMMAND --help for every command" || fail "loom --help does not list the commands"

# --- bad input: one error line naming the problem, exit status 1 ---
expect_error() {  # [want_status=N] expect_error WHAT PATTERN -- command...   (N: 1 by default)
  local what=$1 pattern=$2 want=${want_status:-1}
  shift 3
  set +e
  "$@" > "$work/out.log" 2> "$work/err.log"
  local status=$?
  set -e
  if [ $status -ne "$want" ]; then fail "$what: exit status $status, expected $want"; return; fi
  if [ "$(wc -l < "$work/err.log")" -ne 1 ]; then fail "$what: expected one error line, got: $(cat "$work/err.log")"; return; fi
  if ! grep -q -- "$pattern" "$work/err.log"; then fail "$what: error does not mention '$pattern': $(cat "$work/err.log")"; return; fi
  # Written for people: the failed C++ condition and its source file only with --debug.
  if grep -qE '\.(cpp|h):[0-9]+' "$work/err.log"; then fail "$what: the error shows C++ source: $(cat "$work/err.log")"; return; fi
  echo "ok: $what -> $(cat "$work/err.log")"
}
expect_error "missing dataset" "/nonexistent" -- "$loom" train "$cfg" --set run.out_dir="$work/c" --set data.path=/nonexistent
mkdir -p "$work/trunc"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte; do
  zcat "/usr/share/datasets/fashion-mnist/$f.gz" > "$work/trunc/$f"
done
truncate -s 1000000 "$work/trunc/train-images-idx3-ubyte"
expect_error "truncated IDX file" "train-images-idx3-ubyte" -- "$loom" train "$cfg" --set run.out_dir="$work/c" --set data.path="$work/trunc"
expect_error "unknown config key" "train.stepz (did you mean train.steps?)" -- "$loom" train "$cfg" --set run.out_dir="$work/c" --set train.stepz=5
expect_error "wrong-type value" "train.steps must be an integer" -- "$loom" train "$cfg" --set run.out_dir="$work/c" --set 'train.steps="many"'
expect_error "bad value" "train.steps.* (given by --set train.steps=-4)" -- "$loom" train "$cfg" --set run.out_dir="$work/c" --set train.steps=-4
expect_error "missing config file" "nope.toml" -- "$loom" train "$work/nope.toml"
expect_error "a key of another setting" "lowcomm.workers (not used by this config: read for model.kind dit, gpt when lowcomm.method" -- "$loom" train "$cfg" --set run.out_dir="$work/c" --set lowcomm.workers=2
# The config reference: one section, the markdown of docs/config.md, a section that is not one.
"$loom" config keys train > "$work/keys.txt" && grep -q '^  train.steps (integer) = 1000' "$work/keys.txt" &&
  ! grep -q '^  optim' "$work/keys.txt" || fail "loom config keys train: $(head -5 "$work/keys.txt")"
"$loom" config keys --markdown | cmp -s - "$here/../../docs/config.md" || fail "loom config keys --markdown is not docs/config.md"
want_status=2 expect_error "config keys of no section" "no section \[trian\] (did you mean train?)" -- "$loom" config keys trian
status=0; "$loom" train "$cfg" --processes 4 2> "$work/err.log" || status=$?
[ $status = 2 ] && grep -q "processes requires --dry-run" "$work/err.log" ||
  fail "--processes without --dry-run: status $status, $(cat "$work/err.log")"
status=0; "$loom" tran "$cfg" 2> "$work/err.log" || status=$?
[ $status = 2 ] && grep -q "unknown command 'tran' (did you mean 'train'?)" "$work/err.log" ||
  fail "a misspelt command: status $status, $(cat "$work/err.log")"
"$loom" train "$cfg" --set run.out_dir="$work/c" --set train.steps=-4 --debug 2> "$work/err.log" && fail "--debug: bad value accepted"
grep -qE 'train.steps.* \[.* at .*config\.cpp:[0-9]+\]$' "$work/err.log" ||
  fail "--debug does not show the failed check and its source: $(cat "$work/err.log")"
# A resumed run keeps the settings its checkpoints were trained with: refused (3), every
# difference named, config.toml untouched; with a config.toml edited by hand to another model,
# the checkpoint itself refuses.
conf=$(md5sum < "$work/a/tiny_dit/config.toml")
want_status=3 expect_error "resume with another model" "model.width: 32 -> 48" -- "$loom" train "$cfg" --set run.out_dir="$work/a" --set model.width=48 --resume
want_status=3 expect_error "resume with other heads and seed" "model.heads: 2 -> 4; run.seed: 3 -> 99" -- "$loom" train "$cfg" --set run.out_dir="$work/a" --set model.heads=4 --set run.seed=99 --resume
[ "$(md5sum < "$work/a/tiny_dit/config.toml")" = "$conf" ] || fail "a refused resume changed config.toml"
# A finished run (trained to its last step and evaluated) resumed: it says so and does nothing.
sums=$(cat "$work/a/tiny_dit/metrics.jsonl" "$work/a/tiny_dit/config.toml" "$work/a/tiny_dit/samples.png" | md5sum)
"$loom" train "$cfg" "${id[@]}" --set run.out_dir="$work/a" --resume > "$work/done.log" 2>&1 &&
  grep -q "tiny_dit is finished: its 6 steps are trained and evaluated" "$work/done.log" &&
  ! grep -q "^step \|^eval\|^checkpoint" "$work/done.log" &&
  [ "$(cat "$work/a/tiny_dit/metrics.jsonl" "$work/a/tiny_dit/config.toml" "$work/a/tiny_dit/samples.png" | md5sum)" = "$sums" ] ||
  fail "resuming a finished run: $(cat "$work/done.log")"
cp -r "$work/a" "$work/a-edited" && sed -i 's/^width = 32$/width = 48/' "$work/a-edited/tiny_dit/config.toml"
expect_error "checkpoint of another model" "another model" -- "$loom" train "$cfg" --set run.out_dir="$work/a-edited" --set model.width=48 --resume
expect_error "sample: not a checkpoint" "trainer_state.json" -- "$loom" sample "$work"

# loom data canvas: the captioned canvases' grid and captions; a split it does not know.
"$loom" data canvas --out "$work/canvas.png" --split test --count 4 --judge > "$work/canvas.log" &&
  [ -s "$work/canvas.png" ] && [ "$(grep -c '^[0-3]: a \(small\|large\) ' "$work/canvas.log")" -eq 4 ] &&
  grep -q "^judge: captions all right [0-9.]*, places 1.000, sizes 1.000" "$work/canvas.log" &&
  echo "ok: data canvas: $(head -1 "$work/canvas.log")" || fail "data canvas: $(cat "$work/canvas.log")"
"$loom" data canvas --out "$work/c.png" --split val > /dev/null 2> "$work/err.log" &&
  fail "data canvas: --split val accepted"
head -1 "$work/err.log" | grep -q "^loom: error: --split: val not in {train,test}" && [ ! -e "$work/c.png" ] &&
  echo "ok: data canvas: unknown split -> $(head -1 "$work/err.log")" ||
  fail "data canvas: unknown split: $(cat "$work/err.log")"

# loom data clips: shards NumPy reads, of the stated shapes and label ranges.
"$loom" data clips --out "$work/clips" --count 10 --shard 4 > "$work/clips.log" || fail "data clips: $(cat "$work/clips.log")"
/usr/bin/python3 - "$work/clips" <<'PY' && echo "ok: data clips: 10 clips in 3 shards NumPy reads" || fail "data clips shards"
import numpy as np, os, sys
d = sys.argv[1]
sizes = []
for s in range(3):
    f, l = np.load(f"{d}/clips-{s:05d}.npy"), np.load(f"{d}/labels-{s:05d}.npy")
    assert f.dtype == np.uint8 and f.shape[1:] == (16, 64, 64) and l.shape == (f.shape[0], 2, 3), (f.shape, l.shape)
    first = l[:, 0]
    assert ((0 <= first[:, 0]) & (first[:, 0] < 10) & (0 <= first[:, 1]) & (first[:, 1] < 8) & (1 <= first[:, 2]) & (first[:, 2] <= 3)).all(), l
    second = l[:, 1]
    assert (((second == -1).all(axis=1)) | ((0 <= second[:, 0]) & (second[:, 0] < 10))).all(), l
    assert f.max() == 255 or f.max() > 200 and f.min() == 0
    sizes.append(f.shape[0])
assert sizes == [4, 4, 2], sizes
assert os.path.getsize(f"{d}/filmstrip.png") > 0
PY

if [ $failures -ne 0 ]; then echo "$failures failed"; exit 1; fi
echo "all CLI checks passed"
