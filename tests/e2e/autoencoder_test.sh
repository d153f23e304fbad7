#!/usr/bin/env bash
# The KL autoencoder (docs/text_to_image.md) under the data-parallel layouts changes nothing but
# memory and speed: the tiny autoencoder trained 8 steps on 1 process vs DDP, ZeRO-3 and ZeRO-2
# over 2: losses to 1e-5 relative, final weights and AdamW
# moments to 1e-4 (compare_runs.py prints the measured differences). A run saved at step 4 under
# ZeRO-3 resumes on one process and ends where the uninterrupted run ends. The run directory
# keeps the weights, the reconstructions and eval.json (held-out PSNR, the box-average
# baseline, the latents' shift and scale); `loom eval` of the last checkpoint gives the same
# PSNR. Tensor, context and pipeline parallelism, an unknown dataset, an unknown
# reconstruction error and an image size the levels do not divide are one clear error each.
# The MMDiT trains on its latents (model.latent), cached once in shards beside it, and samples
# through its decoder; a model whose shape is not the latent's, or a model.latent that is not an
# autoencoder, is one clear error each. The class-conditional DiT trains on the latents of an
# autoencoder of Fashion-MNIST's images the same way; one of the canvases is refused for it.
# Usage: autoencoder_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/parallel_lib.sh"

cfg=$here/tiny_autoencoder.toml name=tiny_autoencoder
common=(--set train.steps=8 --set train.log_every=1 --set train.batch_size=4
  --set train.ckpt_every=4 --set eval.val_images=16)
ref=$work/np1
"$loom" train "$cfg" "${common[@]}" --set run.out_dir="$ref" > "$ref.log" 2>&1 ||
  { fail "single-process run failed"; tail -3 "$ref.log"; }
for layout in ddp2 zero3x2 zero2x2; do
  out=$work/$layout
  case $layout in
    ddp2) par=() ;;
    zero3x2) par=(--set parallel.data_parallel=zero3) ;;
    zero2x2) par=(--set parallel.data_parallel=zero2) ;;
  esac
  "$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" "${par[@]}" \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "$layout: run failed"; tail -3 "$out.log"; continue; }
  parity "autoencoder $layout" "$ref/$name" "$out/$name"
done

# Saved under ZeRO-3 over 2 at step 4, resumed on one process.
base=$work/reshard
"$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" --set train.stop_after=4 \
  --set parallel.data_parallel=zero3 --set run.out_dir="$base" > "$base.log" 2>&1 ||
  fail "reshard: first half failed"
resumed=$work/resumed
rm -rf "$resumed" && cp -r "$base" "$resumed"
"$loom" train "$cfg" "${common[@]}" --resume --set run.out_dir="$resumed" > "$resumed.log" 2>&1 ||
  { fail "resume on 1 process failed"; tail -3 "$resumed.log"; }
grep -q "resumed from .*step-000004 at step 4" "$resumed.log" || fail "did not resume at step 4"
parity "autoencoder zero3 x2 to step 4, then 1 process to 8," "$ref/$name" "$resumed/$name"

# What the run leaves, and `loom eval` of its last checkpoint.
run=$ref/$name
for f in model.safetensors reconstructions.png eval.json; do
  [ -s "$run/$f" ] || fail "the run wrote no $f"
done
"$loom" eval "$run/step-000008" --out "$work/eval.json" > "$work/eval.log" 2>&1 ||
  { fail "eval failed"; tail -3 "$work/eval.log"; }
/usr/bin/python3 - "$run/eval.json" "$work/eval.json" <<'PY' || fail "eval.json: $(cat "$run/eval.json")"
import json, sys
run, again = (json.load(open(p)) for p in sys.argv[1:])
assert run["val_images"] == 16 and again["val_images"] == 16, (run, again)
assert 0 < run["psnr"] < 60 and 0 < run["box_baseline_psnr"] < 60, run
assert abs(run["psnr"] - again["psnr"]) < 1e-4, ("loom eval differs from the run", run, again)
assert abs(run["box_baseline_psnr"] - again["box_baseline_psnr"]) < 1e-9, (run, again)
assert run["latent_scale"] > 0 and "latent_shift" in run, run
print("eval:", {k: round(v, 4) if isinstance(v, float) else v for k, v in run.items()})
PY

bad 2 "model.kind autoencoder has no tensor or context parallelism" "$cfg" --set parallel.tp=2
bad 2 "model.kind autoencoder has no pipeline parallelism" "$cfg" --set parallel.pp=2
bad 1 "data.dataset 'kjv' is not known for model.kind autoencoder" "$cfg" \
  --set data.dataset=\"kjv\"
bad 1 'train.reconstruction "l3" is not known' "$cfg" --set train.reconstruction=\"l3\"
bad 1 "image_size 62 is not a multiple of 2^downsamples" "$cfg" --set model.image_size=62
bad 1 "the canvases are 1 x 64 x 64, model.channels 1 and model.image_size 32" "$cfg" \
  --set model.image_size=32

# Latent diffusion: the tiny MMDiT on this autoencoder's 4 x 16 x 16 latents of 5000 canvases
# (two cache shards). The first run encodes them all, on 2 processes one shard each; the next
# finds them cached; with one shard removed, the next (TP2: both ranks encode it, each under its
# own temporary name) encodes only that one. Samples and the
# judge's canvases are decoded to 64 x 64.
mm=$here/tiny_mmdit.toml
latent=(--set model.latent=\"$run\" --set model.channels=4 --set model.image_size=16
  --set model.patch=4 --set data.canvases=5000 --set train.steps=4 --set eval.val_images=8)
cache=$run/latents
"$mpirun" --oversubscribe -np 2 "$loom" train "$mm" "${latent[@]}" --set run.out_dir="$work/latent" \
  > "$work/latent.log" 2>&1 || { fail "latent mmdit: run failed"; tail -3 "$work/latent.log"; }
grep -q "latents: 5000 training canvases, 5000 encoded now, 0 read from the cache" "$work/latent.log" ||
  fail "latent mmdit: not encoded: $(grep latents: "$work/latent.log")"
[ "$(ls "$cache"/*/shard-*.npy | wc -l)" = 2 ] || fail "latent cache: $(ls -R "$cache")"
"$loom" train "$mm" "${latent[@]}" --set run.out_dir="$work/latent2" > "$work/latent2.log" 2>&1 ||
  { fail "latent mmdit: second run failed"; tail -3 "$work/latent2.log"; }
grep -q "latents: 5000 training canvases, 0 encoded now, 5000 read from the cache" "$work/latent2.log" ||
  fail "latent mmdit: cache not used: $(grep latents: "$work/latent2.log")"
parity "latent mmdit, the cache's latents" "$work/latent/tiny_mmdit" "$work/latent2/tiny_mmdit"
rm "$cache"/*/shard-00001.npy
"$mpirun" --oversubscribe -np 2 "$loom" train "$mm" "${latent[@]}" --set parallel.tp=2 \
  --set run.out_dir="$work/latent3" > "$work/latent3.log" 2>&1 ||
  { fail "latent mmdit: third run failed"; tail -3 "$work/latent3.log"; }
grep -q "latents: 5000 training canvases, 904 encoded now, 4096 read from the cache" "$work/latent3.log" ||
  fail "latent mmdit: a lost shard not encoded again: $(grep latents: "$work/latent3.log")"
ckpt=$work/latent/tiny_mmdit/step-000004
"$loom" sample "$ckpt" --prompt "a large bag at the top left" --per-class 2 --steps 2 \
  --png "$work/latent.png" > "$work/latent-sample.log" 2>&1 || { fail "latent sample failed"; tail -2 "$work/latent-sample.log"; }
/usr/bin/python3 - "$work/latent.png" <<'PY' || fail "latent sample: not two 64 x 64 canvases"
import struct, sys
w, h = struct.unpack(">II", open(sys.argv[1], "rb").read()[16:24])
assert (w, h) == (2 * 64 + 3 * 2, 64 + 2 * 2), (w, h)  # image_grid: 2 cells, 2-pixel padding
PY
"$loom" eval "$ckpt" --samples 4 --steps 2 --out "$work/latent-eval.json" > "$work/latent-eval.log" 2>&1 ||
  { fail "latent eval failed"; tail -3 "$work/latent-eval.log"; }
bad 1 "model.latent: the autoencoder's latents are 4 x 16 x 16; model.channels 1 and model.image_size 64" \
  "$mm" --set model.latent=\"$run\"
bad 1 "holds a run of model.kind mmdit, not an autoencoder" "$mm" \
  --set model.latent=\"$work/latent/tiny_mmdit\" --set model.channels=4 --set model.image_size=16

# The class-conditional DiT on the latents of an autoencoder of Fashion-MNIST's 28 x 28 images
# (4 x 7 x 7): the 60,000 training images encoded once, read from the cache by the next run;
# samples, the grid and the judge's images decoded to 28 x 28.
fm=$work/fmnist.toml
sed -e 's/^canvases = 256/dataset = "fashion_mnist"/' -e 's/^downsamples = 2/downsamples = 2\nimage_size = 28/' \
  "$cfg" > "$fm"
"$loom" train "$fm" --set run.out_dir="$work/fm" --set eval.val_images=16 > "$work/fm.log" 2>&1 ||
  { fail "fashion-mnist autoencoder: run failed"; tail -3 "$work/fm.log"; }
grep -q "held-out PSNR .* dB on 16 test images" "$work/fm.log" ||
  fail "fashion-mnist autoencoder: no held-out PSNR: $(grep -m1 PSNR "$work/fm.log")"
dl=(--set model.latent=\"$work/fm/$name\" --set model.channels=4 --set model.image_size=7
  --set model.patch=1 --set train.steps=4 --set eval.val_images=16
  --set eval.classifier=\"$here/../../assets/fmnist_classifier\" --set eval.num_samples=10)
"$loom" train "$here/tiny_dit.toml" "${dl[@]}" --set run.out_dir="$work/dl" > "$work/dl.log" 2>&1 ||
  { fail "latent dit: run failed"; tail -3 "$work/dl.log"; }
grep -q "latents: 60000 training images, 60000 encoded now, 0 read from the cache" "$work/dl.log" ||
  fail "latent dit: not encoded: $(grep latents: "$work/dl.log")"
grep -q "eval: class accuracy .* of 10 samples" "$work/dl.log" || fail "latent dit: not judged"
"$loom" train "$here/tiny_dit.toml" "${dl[@]}" --set run.out_dir="$work/dl2" > "$work/dl2.log" 2>&1 ||
  { fail "latent dit: second run failed"; tail -3 "$work/dl2.log"; }
grep -q "latents: 60000 training images, 0 encoded now, 60000 read from the cache" "$work/dl2.log" ||
  fail "latent dit: cache not used: $(grep latents: "$work/dl2.log")"
"$loom" sample "$work/dl/tiny_dit/step-000004" --per-class 2 --steps 2 --png "$work/dl.png" \
  > "$work/dl-sample.log" 2>&1 || { fail "latent dit sample failed"; tail -2 "$work/dl-sample.log"; }
/usr/bin/python3 - "$work/dl.png" <<'PY' || fail "latent dit sample: not 10 rows of 28 x 28 images"
import struct, sys
w, h = struct.unpack(">II", open(sys.argv[1], "rb").read()[16:24])
assert h == 10 * 28 + 11 * 2, (w, h)  # image_grid: 10 rows, 2-pixel padding
PY
bad 1 "the autoencoder in $run was trained on canvas images, this model trains on fashion_mnist images" \
  "$here/tiny_dit.toml" "${dl[@]}" --set model.latent=\"$run\"
bad 1 "model.latent: the autoencoder's latents are 4 x 7 x 7; model.channels 1 and model.image_size 28" \
  "$here/tiny_dit.toml" --set model.latent=\"$work/fm/$name\"

"$loom" sample "$run/step-000008" --png "$work/x.png" > "$work/bad.log" 2>&1 &&
  fail "loom sample accepted an autoencoder checkpoint"
grep -q "holds an autoencoder model, which \`loom sample\` has nothing for" "$work/bad.log" ||
  fail "no clear error for loom sample of an autoencoder: $(head -2 "$work/bad.log")"
finish
