#!/usr/bin/env bash
# The text-to-image MMDiT (docs/text_to_image.md) under the parallel layouts changes nothing but
# memory and speed: the tiny MMDiT (2 joint blocks, 4 heads, a 1-block caption encoder) trained
# 8 steps on 1 process vs TP2 (each stream's heads and MLP split), DDP2, ZeRO-3 over 2, a
# 2-stage pipeline (1F1B, 4 micro-batches), TP2 x ZeRO-2 over 4, activation checkpointing,
# context and sequence parallelism over the joint sequence (CP2 ring and Ulysses, CP2 x TP2,
# TP2 + SP, CP2 x TP2 + SP: each rank its share of the caption's and of the image's rows), and
# with PixArt's cross-attention blocks (model.conditioning "cross") TP2, ZeRO-3, CP2 ring and
# Ulysses (the caption's keys and values gathered) and TP2 + SP: losses to 1e-5 relative, final
# weights and AdamW moments to 1e-4 (the bounds of the DiT's parity tests; measured differences
# printed). Every low-precision recipe (fp8 tensorwise and blockwise, MXFP8, NVFP4) on every
# block trains, and under TP2 its losses are within 2e-3 of one process's. A run saved under
# TP2 x ZeRO-2 resumes on one process and ends where the uninterrupted run ends. A cp that does not divide the caption's tokens is refused with the
# reason.
# Diffusion-DPO from the trained run: see below. `loom sample --prompt` writes the canvases of a caption; an unknown word, a
# caption longer than the encoder's context and a too short model.text_length are one clear
# error each; `loom eval` judges held-out captions.
# Usage: mmdit_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/parallel_lib.sh"

cfg=$here/tiny_mmdit.toml name=tiny_mmdit
common=(--set train.steps=8 --set train.log_every=1 --set model.heads=4 --set train.grad_accum=4
  --set train.batch_size=4 --set train.ckpt_every=4 --set eval.val_images=0)
ref=$work/np1
"$loom" train "$cfg" "${common[@]}" --set run.out_dir="$ref" > "$ref.log" 2>&1 ||
  { fail "single-process run failed"; tail -3 "$ref.log"; }
for layout in tp2 ddp2 zero3x2 pp2 tp2-zero2x2 recompute cp2 cp2-ulysses cp2-tp2 sp2 cp2-sp2; do
  out=$work/$layout
  case $layout in
    tp2) np=2; par=(--set parallel.tp=2) ;;
    cp2) np=2; par=(--set parallel.cp=2) ;;
    cp2-ulysses) np=2; par=(--set parallel.cp=2 --set parallel.context_parallel=\"ulysses\") ;;
    cp2-tp2) np=4; par=(--set parallel.cp=2 --set parallel.tp=2) ;;
    sp2) np=2; par=(--set parallel.tp=2 --set parallel.sequence_parallel=true) ;;
    cp2-sp2) np=4; par=(--set parallel.cp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true) ;;
    ddp2) np=2; par=() ;;
    zero3x2) np=2; par=(--set parallel.data_parallel=zero3) ;;
    pp2) np=2; par=(--set parallel.pp=2) ;;
    tp2-zero2x2) np=4; par=(--set parallel.tp=2 --set parallel.data_parallel=zero2) ;;
    recompute) np=1; par=(--set parallel.activation_checkpointing=full) ;;
  esac
  "$mpirun" --oversubscribe -np $np "$loom" train "$cfg" "${common[@]}" "${par[@]}" \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "$layout: run failed"; tail -3 "$out.log"; continue; }
  parity "mmdit $layout" "$ref/$name" "$out/$name"
done

# PixArt's cross-attention blocks (model.conditioning "cross") under TP2, ZeRO-3 over 2, CP2
# (ring and Ulysses) and TP2 + SP.
cross=(--set model.conditioning=\"cross\")
"$loom" train "$cfg" "${common[@]}" "${cross[@]}" --set run.out_dir="$work/cross-np1" > "$work/cross-np1.log" 2>&1 ||
  { fail "cross: single-process run failed"; tail -3 "$work/cross-np1.log"; }
for layout in tp2 zero3x2 cp2 cp2-ulysses sp2; do
  out=$work/cross-$layout
  case $layout in
    tp2) par=(--set parallel.tp=2) ;;
    cp2) par=(--set parallel.cp=2) ;;
    cp2-ulysses) par=(--set parallel.cp=2 --set parallel.context_parallel=\"ulysses\") ;;
    zero3x2) par=(--set parallel.data_parallel=zero3) ;;
    sp2) par=(--set parallel.tp=2 --set parallel.sequence_parallel=true) ;;
  esac
  "$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" "${cross[@]}" "${par[@]}" \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "cross $layout: run failed"; tail -3 "$out.log"; continue; }
  parity "mmdit cross $layout" "$work/cross-np1/$name" "$out/$name"
done

# Low-precision recipes (precision/recipe.h) on the MMDiT's blocks, every block quantised: each
# trains with finite losses and TP2 matches one process within 2e-3 relative on every loss (as
# the DiT's recipes under TP2 in low_precision_test.sh: each rank quantises its own share, and
# TP2 cuts the 32-value MX blocks of the row-parallel layers in two).
for recipe in fp8_tensorwise fp8_blockwise mxfp8 nvfp4; do
  lp=(--set train.precision=\"$recipe\" --set precision.bf16_blocks=[])
  [ $recipe = fp8_blockwise ] && lp+=(--set precision.block_size=16)
  [ $recipe = nvfp4 ] && lp+=(--set precision.stochastic_rounding=false)
  "$loom" train "$cfg" "${common[@]}" "${lp[@]}" --set run.out_dir="$work/$recipe-np1" > "$work/$recipe-np1.log" 2>&1 ||
    { fail "$recipe: single-process run failed"; tail -3 "$work/$recipe-np1.log"; continue; }
  grep -q "^$recipe: " "$work/$recipe-np1.log" || fail "$recipe: no recipe line in the log"
  "$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" "${lp[@]}" --set parallel.tp=2 \
    --set run.out_dir="$work/$recipe-tp2" > "$work/$recipe-tp2.log" 2>&1 ||
    { fail "$recipe tp2: run failed"; tail -3 "$work/$recipe-tp2.log"; continue; }
  echo -n "mmdit $recipe tp2 vs 1 process: "
  /usr/bin/python3 "$here/compare_runs.py" "$work/$recipe-np1/$name" "$work/$recipe-tp2/$name" 2e-3 \
    --losses-only || fail "mmdit $recipe tp2: losses not within 2e-3 of 1 process"
done

# Resharding: saved under TP2 x ZeRO-2 at step 4, resumed on one process.
base=$work/reshard
"$mpirun" --oversubscribe -np 4 "$loom" train "$cfg" "${common[@]}" --set train.stop_after=4 \
  --set parallel.tp=2 --set parallel.data_parallel=zero2 --set run.out_dir="$base" > "$base.log" 2>&1 ||
  fail "reshard: first half failed"
resumed=$work/resumed
rm -rf "$resumed" && cp -r "$base" "$resumed"
"$loom" train "$cfg" "${common[@]}" --resume --set run.out_dir="$resumed" > "$resumed.log" 2>&1 ||
  { fail "resume on 1 process failed"; tail -3 "$resumed.log"; }
grep -q "resumed from .*step-000004 at step 4" "$resumed.log" || fail "did not resume at step 4"
parity "mmdit tp2 x zero2 to step 4, then 1 process to 8," "$ref/$name" "$resumed/$name"

bad 3 "context parallelism splits each part of the 56 caption and image tokens over parallel.cp 3, which does not divide 40" \
  "$cfg" --set parallel.cp=3
bad 1 "model.text_length 20 is shorter than the longest canvas caption (35 tokens)" "$cfg" \
  --set model.text_length=20

# Diffusion-DPO from the 8-step run: pairs sampled once and cached beside it (a second run
# samples none), the first loss log 2 (the model starts as the reference), TP2 equal to one
# process (beta 10: a large beta scales the margins' rounding differences into the step), and
# one clear error for each bad reference.
dpo=(--set dpo.reference=\"$ref/$name\" --set dpo.pairs=24 --set dpo.beta=10 --set train.steps=4 --set train.ckpt_every=4
  --set eval.classifier=\"$here/../../assets/fmnist_classifier\" --set eval.num_samples=4)
"$loom" train "$cfg" "${common[@]}" "${dpo[@]}" --set run.out_dir="$work/dpo-np1" > "$work/dpo-np1.log" 2>&1 ||
  { fail "dpo: single-process run failed"; tail -3 "$work/dpo-np1.log"; }
grep -q "dpo: 24 pairs (24 sampled now, 0 read from $ref/$name/preference_pairs/" "$work/dpo-np1.log" ||
  fail "dpo: the pairs were not sampled into the reference's run: $(grep -m1 '^dpo' "$work/dpo-np1.log")"
grep -q "^step      1/4 | loss 0.6931 " "$work/dpo-np1.log" ||
  fail "dpo: the first loss is not log 2: $(grep -m1 '^step ' "$work/dpo-np1.log")"
"$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" "${dpo[@]}" --set parallel.tp=2 \
  --set run.out_dir="$work/dpo-tp2" > "$work/dpo-tp2.log" 2>&1 ||
  { fail "dpo tp2: run failed"; tail -3 "$work/dpo-tp2.log"; }
grep -q "dpo: 24 pairs (0 sampled now, 24 read from" "$work/dpo-tp2.log" ||
  fail "dpo: the cached pairs were sampled again"
# Weights to 5e-4 (emulated device: 1.9e-4 in final.linear, whose gradients are near zero
# and AdamW's step normalises their rounding; 2.1e-5 on the host).
PARITY_WEIGHTS_RTOL=5e-4 parity "mmdit dpo tp2" "$work/dpo-np1/$name" "$work/dpo-tp2/$name"
bad 1 "dpo.reference: $work/none is not a directory" "$cfg" "${dpo[@]}" --set dpo.reference=\"$work/none\"
bad 1 "the reference's model is joint, image 1 x 64 in patches of 16, width 32" "$cfg" "${dpo[@]}" \
  --set model.heads=4 --set model.width=64
bad 2 "dpo: no pipeline parallelism (parallel.pp 2)" "$cfg" "${common[@]}" "${dpo[@]}" --set parallel.pp=2
bad 1 "dpo needs eval.classifier" "$cfg" "${common[@]}" "${dpo[@]}" --set eval.classifier=\"\"

# Sampling a caption, and the errors of a bad one.
ckpt=$ref/$name/step-000008
"$loom" sample "$ckpt" --prompt "a large bag at the top left and a small sandal at the bottom right" \
  --per-class 2 --steps 2 --png "$work/prompt.png" > "$work/sample.log" 2>&1 ||
  { fail "sample --prompt failed"; cat "$work/sample.log"; }
[ -s "$work/prompt.png" ] && grep -q "sandal at the bottom right" "$work/prompt.png.txt" ||
  fail "sample --prompt wrote no PNG and caption"
"$loom" sample "$ckpt" --prompt "a large hat at the top left" --png "$work/x.png" > "$work/bad.log" 2>&1 &&
  fail "an unknown word was accepted"
grep -q 'the word "hat" is not in the caption vocabulary' "$work/bad.log" ||
  fail "no clear error for an unknown word: $(head -2 "$work/bad.log")"
long=$(printf 'a large bag at the top left and %.0s' 1 2 3 4 5)"a bag"
"$loom" sample "$ckpt" --prompt "$long" --png "$work/x.png" > "$work/bad.log" 2>&1 &&
  fail "a caption longer than the context was accepted"
grep -q "tokens, more than the text encoder's context of 40" "$work/bad.log" ||
  fail "no clear error for a long caption: $(head -2 "$work/bad.log")"
"$loom" sample "$ckpt" --tokens 3 --png "$work/x.png" > "$work/bad.log" 2>&1 &&
  fail "a GPT flag was accepted for an MMDiT checkpoint"

# The judge of held-out captions (an untrained model: the figures exist and are in range).
"$loom" eval "$ckpt" --samples 8 --steps 2 --out "$work/eval.json" > "$work/eval.log" 2>&1 ||
  { fail "eval failed"; tail -3 "$work/eval.log"; }
/usr/bin/python3 - "$work/eval.json" <<'PY' || fail "eval.json lacks the judge's figures"
import json, sys
e = json.load(open(sys.argv[1]))
for k in ("caption_accuracy", "place_accuracy", "size_accuracy", "class_accuracy"):
    assert 0 <= e[k] <= 1, (k, e[k])
assert e["samples"] == 8 and e["fid"] > 0 and e["fid_floor"] > 0, e
print("eval:", {k: round(v, 3) if isinstance(v, float) else v for k, v in e.items()})
PY
finish
