#!/usr/bin/env bash
# A run's TensorBoard event file, read back by TensorBoard's own reader (PyPI `tensorboard`, in
# the pinned Python environment: python_env.sh): every step metrics.jsonl records has the
# same loss, lr and throughput as a TensorBoard scalar (float32), with the same steps; a resumed
# run adds a second event file that continues the steps. A DiT run with sample.every writes a
# sample grid every that many steps, as samples/step-NNNNNN.png and as a TensorBoard image of
# the same PNG bytes at the same step.
# Usage: tensorboard_test.sh LOOM WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/python_env.sh"
need_python tensorboard
run=(train "$here/tiny_gpt.toml" --set "run.out_dir=\"$work\"" --set train.log_every=2
     --set train.steps=8 --set eval.every=4 --set sample.tokens=0)
"$loom" "${run[@]}" --set train.stop_after=4 > "$work/a.log" 2>&1 || { echo "FAIL: run: $(tail -3 "$work/a.log")"; exit 1; }
"$loom" "${run[@]}" --resume > "$work/b.log" 2>&1 || { echo "FAIL: resume: $(tail -3 "$work/b.log")"; exit 1; }
"$py" - "$work/tiny_gpt" <<'PY'
import json, math, os, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
files = sorted(os.listdir(os.path.join(run, "tensorboard")))
assert len(files) == 2, f"expected one event file per start (2), found {files}"
acc = EventAccumulator(os.path.join(run, "tensorboard"), size_guidance={"scalars": 0})
acc.Reload()
tags = acc.Tags()["scalars"]
want = {}
finals = []  # each start's final evaluation: no loss, its figures as final_eval/* scalars
for line in open(os.path.join(run, "metrics.jsonl")):
    m = json.loads(line)
    if "final_eval" in m:
        finals.append(m)
        continue
    want[m["step"]] = m
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
checked = 0
for tag in ("loss", "lr", "tok_per_s", "mem_live_bytes", "time_s/step", "val/nats_per_token"):
    assert tag in tags, f"no scalar {tag} (have {sorted(tags)[:12]}...)"
    events = {e.step: e.value for e in acc.Scalars(tag)}
    expected = {}
    for step, m in want.items():
        v = m
        for part in tag.split("/"):
            v = v.get(part) if isinstance(v, dict) else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            expected[step] = f32(v)
    assert expected, f"metrics.jsonl has no {tag}"
    assert set(events) == set(expected), f"{tag}: steps {sorted(events)} vs metrics.jsonl {sorted(expected)}"
    for step, v in expected.items():
        assert events[step] == v, f"{tag} at step {step}: {events[step]} vs {v}"
        checked += 1
assert [f["step"] for f in finals] == [4, 8], f"final evaluations at {[f['step'] for f in finals]}"
for key in ("nats_per_token", "bits_per_byte"):
    events = {e.step: e.value for e in acc.Scalars("final_eval/" + key)}
    expected = {f["step"]: f32(f["final_eval"][key]) for f in finals}
    assert events == expected, f"final_eval/{key}: {events} vs metrics.jsonl {expected}"
    checked += len(expected)
print(f"ok: {checked} scalars over {len(want)} logged steps and the final evaluation match metrics.jsonl ({len(tags)} tags, 2 event files)")
PY
[ $? -eq 0 ] || exit 1

"$loom" train "$here/tiny_dit.toml" --set "run.out_dir=\"$work\"" --set train.steps=6 \
  --set sample.every=3 > "$work/dit.log" 2>&1 || { echo "FAIL: dit run: $(tail -3 "$work/dit.log")"; exit 1; }
"$py" - "$work/tiny_dit" <<'PY'
import os, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
acc = EventAccumulator(os.path.join(run, "tensorboard"), size_guidance={"images": 0})
acc.Reload()
assert "samples" in acc.Tags()["images"], f"no image 'samples' (have {acc.Tags()['images']})"
events = acc.Images("samples")
assert [e.step for e in events] == [3, 6], f"image steps {[e.step for e in events]}, expected [3, 6]"
for e in events:
    png = open(os.path.join(run, "samples", f"step-{e.step:06d}.png"), "rb").read()
    assert e.encoded_image_string == png, f"step {e.step}: the image differs from its PNG file"
    width, height = struct.unpack(">II", png[16:24])
    assert (e.width, e.height) == (width, height), f"step {e.step}: {e.width}x{e.height} vs {width}x{height}"
print(f"ok: {len(events)} sample grids in TensorBoard ({events[0].width}x{events[0].height}), "
      "the same PNGs as samples/")
PY
