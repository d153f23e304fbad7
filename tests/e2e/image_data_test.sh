#!/usr/bin/env bash
# DiT training from PNG files (data.dataset = "images"): a folder with labels.txt, and
# webdataset-style tar shards (KEY.png + KEY.cls). The first 512 Fashion-MNIST training images
# and the first 100 test images are written as PNG files by Python (PIL, from the IDX files);
#   - a run on the folder and a run on the shards equal, loss for loss, a run on the same 512
#     images read from the IDX files (data.clusters holding them as cluster 0), and their
#     held-out losses (data.val_path against the test split) are equal too;
#   - 3 + resume + 3 steps on the shards equal 6 steps, checkpoint bytes and all;
#   - bad input, one clear error each before anything is written: a member that is not a PNG,
#     a truncated shard, a sample without its .cls, a label out of range, an image of another
#     size, a compressed shard.
# Usage: image_data_test.sh LOOM WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
/usr/bin/python3 - "$work" <<'PY' || { echo "FAIL: could not write the PNG datasets"; exit 1; }
import gzip, io, os, sys, tarfile
import numpy as np
from PIL import Image
work = sys.argv[1]
src = "/usr/share/datasets/fashion-mnist"
def idx(name, offset):
    return np.frombuffer(gzip.open(os.path.join(src, name)).read(), dtype=np.uint8, offset=offset)
images = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:512]
labels = idx("train-labels-idx1-ubyte.gz", 8)[:512]
test_images = idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:100]
test_labels = idx("t10k-labels-idx1-ubyte.gz", 8)[:100]
def png(a):
    b = io.BytesIO(); Image.fromarray(a, mode="L").save(b, format="PNG"); return b.getvalue()
def folder(path, imgs, labs):
    os.makedirs(os.path.join(path, "img"))
    with open(os.path.join(path, "labels.txt"), "w") as f:
        f.write("# relative path, label\n")
        for i, (a, l) in enumerate(zip(imgs, labs)):
            open(os.path.join(path, "img", f"{i:05d}.png"), "wb").write(png(a))
            f.write(f"img/{i:05d}.png {l}\n")
folder(os.path.join(work, "folder"), images, labels)
folder(os.path.join(work, "val"), test_images, test_labels)
def add(t, name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
os.makedirs(os.path.join(work, "shards"))
for s in range(2):
    with tarfile.open(os.path.join(work, "shards", f"train-{s:04d}.tar"), "w") as t:
        for i in range(s * 256, (s + 1) * 256):
            add(t, f"sample{i:06d}.png", png(images[i]))
            add(t, f"sample{i:06d}.cls", str(labels[i]).encode())
np.save(os.path.join(work, "first512.npy"), np.zeros(512, dtype=np.int64))
# Bad shards.
def shard(name, members):
    with tarfile.open(os.path.join(work, name), "w") as t:
        for n, d in members: add(t, n, d)
good = [("a.png", png(images[0])), ("a.cls", b"3")]
shard("notpng.tar", good + [("b.png", b"GIF89a not a png at all, not at all"), ("b.cls", b"1")])
shard("nocls.tar", good + [("b.png", png(images[1]))])
shard("badlabel.tar", good + [("b.png", png(images[1])), ("b.cls", b"12")])
shard("size.tar", good + [("b.png", png(np.zeros((32, 32), np.uint8))), ("b.cls", b"1")])
data = open(os.path.join(work, "shards", "train-0000.tar"), "rb").read()
open(os.path.join(work, "cut.tar"), "wb").write(data[:len(data) // 2 + 100])
open(os.path.join(work, "gz.tar"), "wb").write(gzip.compress(data))
PY

run() {  # out-dir extra-args...
  local out=$1
  shift
  "$loom" train "$here/tiny_dit.toml" --set run.id=cmp --set run.out_dir="$out" --set train.log_every=1 \
    --set eval.val_images=100 "$@" > "$out.log" 2>&1 || fail "run $out: $(tail -2 "$out.log")"
}
losses() { grep -o '"loss":[^,]*' "$1/tiny_dit/metrics.jsonl"; }
run "$work/idx" --set data.clusters=\"$work/first512.npy\" --set data.cluster=0
run "$work/png" --set data.dataset=\"images\" --set data.path=\"$work/folder\" --set data.val_path=\"$work/val\"
run "$work/tar" --set data.dataset=\"images\" --set data.path=\"$work/shards\" --set data.val_path=\"$work/val\"
for kind in png tar; do
  [ -n "$(losses "$work/idx")" ] && [ "$(losses "$work/idx")" = "$(losses "$work/$kind")" ] &&
    echo "ok: $kind: the losses of the same images read from the IDX files" || fail "$kind: losses differ"
  grep -q "final held-out loss" "$work/$kind.log" && [ "$(grep "final held-out" "$work/idx.log")" = "$(grep "final held-out" "$work/$kind.log")" ] &&
    echo "ok: $kind: held-out loss equal ($(grep -o 'loss at step.*' "$work/$kind.log"))" || fail "$kind: held-out losses differ"
done
tar=(--set data.dataset=\"images\" --set data.path=\"$work/shards\")
"$loom" train "$here/tiny_dit.toml" --set run.id=cmp --set run.out_dir="$work/res" --set train.log_every=1 \
  --set eval.val_images=100 "${tar[@]}" --set train.stop_after=3 > /dev/null 2>&1
"$loom" train "$here/tiny_dit.toml" --set run.id=cmp --set run.out_dir="$work/res" --set train.log_every=1 \
  --set eval.val_images=100 "${tar[@]}" --resume > "$work/res.log" 2>&1 || fail "resume: $(tail -2 "$work/res.log")"
cmp -s "$work/tar/tiny_dit/step-000006/rank-00000.safetensors" "$work/res/tiny_dit/step-000006/rank-00000.safetensors" &&
  echo "ok: 3 + resume + 3 steps on the shards equal 6 steps" || fail "the resumed run differs"

bad() {  # expected-message shard
  "$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/bad" --set data.dataset=\"images\" \
    --set data.path=\"$work/$2\" > "$work/bad.log" 2>&1 && fail "$2 was accepted"
  grep -q "$1" "$work/bad.log" && echo "ok: $2: $(grep -o 'image data: .*' "$work/bad.log" | sed 's/ \[.*//')" ||
    fail "no '$1' for $2: $(tail -1 "$work/bad.log")"
  [ -z "$(ls -A "$work/bad/tiny_dit" 2> /dev/null | grep -v '^.lock$')" ] || fail "$2 left files in the run directory"
}
bad "notpng.tar:b.png is not a PNG file" notpng.tar
bad "sample b lacks its .cls member" nocls.tar
bad "label '12' is not an integer in \[0, 10)" badlabel.tar
bad "b.png is 32x32, the model takes 28x28" size.tar
bad "cut.tar:sample000129.cls: Truncated input file" cut.tar
bad "is not an uncompressed tar file" gz.tar
[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo PASS
