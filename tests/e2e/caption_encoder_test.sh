#!/usr/bin/env bash
# The MMDiT's caption encoders (docs/text_to_image.md) besides the closed word vocabulary:
#  - data.tokenizer = "bpe": a byte-level BPE learned from the training captions, kept in the
#    run directory (tokenizer.bpe) and read back by `loom sample`;
#  - model.text_encoder: a GPT trained on the captions (data.dataset "canvas", its BPE learned
#    by the run), frozen; the MMDiT reads its features through its tokenizer. The MMDiT under
#    TP2 and CP2 equals one process (losses to 1e-5 relative, weights and AdamW moments to 1e-4,
#    as the MMDiT's other parity tests).
# Diffusion-DPO from the BPE run keeps its tokenizer. A prompt token the training captions never hold, a caption longer than model.text_length, a
# text encoder that is not a GPT, one whose context is shorter than the captions and a
# data.tokenizer beside a text encoder are one clear error each.
# Usage: caption_encoder_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$here/parallel_lib.sh"

# A GPT on the captions of 2000 training canvases.
gpt=$work/gpt/gpt_captions
"$loom" train "$here/../../configs/gpt_captions.toml" --set train.steps=20 --set train.max_minutes=0 \
  --set model.width=32 --set model.depth=1 --set model.heads=2 --set data.canvases=2000 \
  --set eval.every=0 --set sample.tokens=0 --set train.ckpt_every=0 --set run.out_dir="$work/gpt" \
  --set data.cache_dir=\"$work/cache\" > "$work/gpt.log" 2>&1 ||
  { fail "gpt on captions failed"; tail -3 "$work/gpt.log"; }
grep -q "canvas_captions/seed0-2000.txt, BPE tokens" "$work/gpt.log" ||
  fail "the GPT did not train on the captions' BPE: $(grep -m1 '^data' "$work/gpt.log")"
[ -s "$gpt/tokenizer.bpe" ] || fail "the GPT's learned BPE is not in its run directory"
"$loom" eval "$gpt/step-000020" > "$work/gpt-eval.log" 2>&1 ||
  { fail "loom eval of the captions GPT failed"; tail -3 "$work/gpt-eval.log"; }

cfg=$here/tiny_mmdit.toml name=tiny_mmdit
common=(--set train.steps=8 --set train.log_every=1 --set model.heads=4 --set train.grad_accum=4
  --set train.batch_size=4 --set train.ckpt_every=4 --set eval.val_images=0)
frozen=(--set model.text_encoder=\"$gpt\")
ref=$work/gpt-np1
"$loom" train "$cfg" "${common[@]}" "${frozen[@]}" --set run.out_dir="$ref" > "$ref.log" 2>&1 ||
  { fail "mmdit with the GPT encoder failed"; tail -3 "$ref.log"; }
grep -q "captions through the frozen GPT $gpt/step-000020" "$ref.log" ||
  fail "the MMDiT did not read the GPT's features: $(grep -m1 '^mmdit' "$ref.log")"
grep -q "text_encoder = .$gpt/step-000020.$" "$ref/$name/config.toml" ||
  fail "the run did not record the GPT's checkpoint"
for layout in tp2 cp2; do
  case $layout in
    tp2) par=(--set parallel.tp=2) ;;
    cp2) par=(--set parallel.cp=2) ;;
  esac
  out=$work/gpt-$layout
  "$mpirun" --oversubscribe -np 2 "$loom" train "$cfg" "${common[@]}" "${frozen[@]}" "${par[@]}" \
    --set run.out_dir="$out" > "$out.log" 2>&1 || { fail "gpt $layout: run failed"; tail -3 "$out.log"; continue; }
  parity "mmdit with the GPT encoder $layout" "$ref/$name" "$out/$name"
done
ckpt=$ref/$name/step-000008
"$loom" sample "$ckpt" --prompt "a small bag at the top right" --per-class 2 --steps 2 \
  --png "$work/gpt.png" > "$work/sample.log" 2>&1 || { fail "sample with the GPT encoder failed"; cat "$work/sample.log"; }
[ -s "$work/gpt.png" ] || fail "sample with the GPT encoder wrote no PNG"
"$loom" sample "$ckpt" --prompt "a large zebra at the top left" --png "$work/x.png" > "$work/bad.log" 2>&1 &&
  fail "a token the training captions never hold was accepted"
grep -q 'the word "zebra" holds the token ".*" (BPE id [0-9]*), which never occurs in the training captions' "$work/bad.log" ||
  fail "no clear error for an unseen token: $(grep -m1 error "$work/bad.log")"
bad 1 "model.text_length 64 is longer than the GPT's context 48" "$cfg" "${frozen[@]}" --set model.text_length=64
bad 1 "leave out data.tokenizer and model.vocab_size" "$cfg" "${frozen[@]}" --set data.tokenizer=\"bpe\"
bad 1 "is a checkpoint of a mmdit model, not a gpt" "$cfg" --set model.text_encoder=\"$ref/$name\"

# The BPE learned with the model.
bpe=$work/bpe
"$loom" train "$cfg" "${common[@]}" --set data.tokenizer=\"bpe\" --set run.out_dir="$bpe" > "$bpe.log" 2>&1 ||
  { fail "mmdit with a BPE failed"; tail -3 "$bpe.log"; }
grep -q "captions as [0-9]* BPE tokens" "$bpe.log" || fail "the MMDiT did not read BPE tokens"
[ -s "$bpe/$name/tokenizer.bpe" ] || fail "the learned BPE is not in the run directory"
"$loom" sample "$bpe/$name/step-000008" --prompt "a small bag at the top right" --per-class 1 \
  --steps 2 --png "$work/bpe.png" > "$work/sample.log" 2>&1 || { fail "sample with the BPE failed"; cat "$work/sample.log"; }
"$loom" sample "$bpe/$name/step-000008" --prompt "a large zebra" --png "$work/x.png" > "$work/bad.log" 2>&1 &&
  fail "bpe: a token the training captions never hold was accepted"
grep -q 'never occurs in the training captions' "$work/bad.log" || fail "bpe: no clear error for an unseen token"
long=$(printf 'a large bag at the top left and %.0s' 1 2 3 4 5)"a bag"
"$loom" sample "$bpe/$name/step-000008" --prompt "$long" --png "$work/x.png" > "$work/bad.log" 2>&1 &&
  fail "bpe: a caption longer than the context was accepted"
grep -q "more than the text encoder's context of 40" "$work/bad.log" || fail "bpe: no clear error for a long caption"
# Post-training reads the captions as its reference did: its BPE, kept in the new run too.
"$loom" train "$cfg" "${common[@]}" --set data.tokenizer=\"bpe\" --set dpo.reference=\"$bpe/$name\" \
  --set dpo.pairs=8 --set train.steps=2 --set eval.classifier=\"$here/../../assets/fmnist_classifier\" \
  --set eval.num_samples=4 --set run.out_dir="$work/dpo" > "$work/dpo.log" 2>&1 ||
  { fail "dpo from the BPE run failed"; tail -3 "$work/dpo.log"; }
cmp -s "$bpe/$name/tokenizer.bpe" "$work/dpo/$name/tokenizer.bpe" ||
  fail "the post-trained run does not keep its reference's BPE"
"$loom" sample "$work/dpo/$name/step-000002" --prompt "a small bag at the top right" --per-class 1 \
  --steps 2 --png "$work/dpo.png" > "$work/sample.log" 2>&1 || { fail "sample of the post-trained run failed"; cat "$work/sample.log"; }
bad 1 "tokens, more than the text encoder's context of 12 (model.text_length)" "$cfg" \
  --set data.tokenizer=\"bpe\" --set model.text_length=12
finish
