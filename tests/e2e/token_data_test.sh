#!/usr/bin/env bash
# `loom data prepare` and training from token files (data.dataset = "tokens"):
#   - the tokens do not depend on the chunk size text is read in (files identical, bit for bit);
#   - a GPT trained from a prepared directory equals one trained on the text itself (same
#     tokenizer, same split): identical losses and held-out figures; 3 + resume + 3 steps equal
#     6 steps, bit for bit;
#   - several directories mixed by data.weights train;
#   - peak resident memory does not grow with the token file: two files of 100 and 200 MB
#     (above 2x the smaller's size would show they were read in);
#   - bad input, one clear error each and nothing half-written: a truncated token file, one
#     with a bad header, tokens outside the vocabulary, an output directory that exists.
# Usage: token_data_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cfg=$here/tiny_gpt.toml
cache=(--set data.cache_dir="$work/cache")
run() {  # out-dir extra-args...: a short tiny-GPT run
  local out=$1
  shift
  "$loom" train "$cfg" "${cache[@]}" --set run.id=cmp --set run.out_dir="$out" --set train.steps=6 \
    --set sample.tokens=0 --set eval.every=3 "$@" > "$out.log" 2>&1 || fail "run $out: $(tail -2 "$out.log")"
}
losses() { grep -o '"loss":[^,]*' "$1/tiny_gpt/metrics.jsonl"; }

bible "Gen1:1-Rev22:21" < /dev/null > "$work/kjv.txt"
"$loom" tokenizer train --input "$work/kjv.txt" --vocab 512 --out "$work/kjv.bpe" > /dev/null
for mb in 64 0.01; do
  "$loom" data prepare --input "$work/kjv.txt" --tokenizer "$work/kjv.bpe" --val-fraction 0.001 \
    --chunk-mb $mb --out "$work/tok-$mb" > "$work/prepare-$mb.log" || fail "prepare --chunk-mb $mb failed"
done
cat "$work/prepare-64.log"
cmp -s "$work/tok-64/train.bin" "$work/tok-0.01/train.bin" && cmp -s "$work/tok-64/val.bin" "$work/tok-0.01/val.bin" &&
  echo "ok: the same tokens in 64 MB and 10 kB chunks" || fail "token files depend on the chunk size"

bpe=(--set model.vocab_size=512)
run "$work/text" "${bpe[@]}" --set data.dataset=\"text\" --set data.path=\"$work/kjv.txt\" \
  --set data.tokenizer=\"$work/kjv.bpe\"
tokens=(--set data.dataset=\"tokens\" --set data.path=\"$work/tok-64\" --set data.tokenizer=\"$work/tok-64\")
run "$work/tokens" "${bpe[@]}" "${tokens[@]}"
[ "$(losses "$work/text")" = "$(losses "$work/tokens")" ] && [ -n "$(losses "$work/text")" ] &&
  echo "ok: training from the token files gives the losses of training on the text" ||
  fail "losses differ between the text and its token files"
grep -v '"source"\|seconds' "$work/text/tiny_gpt/eval.json" > "$work/a.eval"
grep -v '"source"\|seconds' "$work/tokens/tiny_gpt/eval.json" > "$work/b.eval"
cmp -s "$work/a.eval" "$work/b.eval" && echo "ok: the same held-out figures" || fail "eval.json differs"
"$loom" train "$cfg" "${cache[@]}" --set run.id=cmp --set run.out_dir="$work/resumed" --set train.steps=6 \
  --set sample.tokens=0 --set eval.every=3 --set train.stop_after=3 "${bpe[@]}" "${tokens[@]}" > /dev/null 2>&1
"$loom" train "$cfg" "${cache[@]}" --set run.out_dir="$work/resumed" --set train.steps=6 \
  --set sample.tokens=0 --set eval.every=3 "${bpe[@]}" "${tokens[@]}" --resume > "$work/resumed.log" 2>&1 ||
  fail "resume failed: $(tail -2 "$work/resumed.log")"
cmp -s "$work/tokens/tiny_gpt/step-000006/rank-00000.safetensors" "$work/resumed/tiny_gpt/step-000006/rank-00000.safetensors" &&
  echo "ok: 3 + resume + 3 steps from token files equal 6 steps" || fail "the resumed run differs"

# Two sources mixed by weight.
bible "Gen1:1-Gen50:26" < /dev/null > "$work/genesis.txt"
"$loom" data prepare --input "$work/genesis.txt" --tokenizer "$work/kjv.bpe" --out "$work/genesis" > /dev/null
run "$work/mixed" "${bpe[@]}" --set data.dataset=\"tokens\" --set data.tokenizer=\"$work/kjv.bpe\" \
  --set "data.paths=[\"$work/tok-64\", \"$work/genesis\"]" --set "data.weights=[3, 1]"
grep -q "data: $work/tok-64, $work/genesis" "$work/mixed.log" && echo "ok: two directories mixed" ||
  fail "the mixed run did not name both sources"

# Resident memory against the file size: 100 and 200 MB token files (byte tokens, uint16).
for n in 12 24; do
  for i in $(seq $n); do cat "$work/kjv.txt"; done > "$work/big.txt"
  "$loom" data prepare --input "$work/big.txt" --val-fraction 0.0002 --out "$work/big$n" > /dev/null
  rm "$work/big.txt"
  /usr/bin/time -f "%M" -o "$work/rss$n" "$loom" train "$cfg" "${cache[@]}" --set run.out_dir="$work/r$n" \
    --set train.steps=20 --set sample.tokens=0 --set eval.every=0 --set data.dataset=\"tokens\" \
    --set data.path=\"$work/big$n\" > "$work/r$n.log" 2>&1 || fail "run on big$n: $(tail -2 "$work/r$n.log")"
  echo "token file $(($(stat -c %s "$work/big$n/train.bin") / 1000000)) MB: peak resident memory $(cat "$work/rss$n" 2> /dev/null) kB"
done
small=$(cat "$work/rss12" 2> /dev/null) large=$(cat "$work/rss24" 2> /dev/null)
file_kb=$(($(stat -c %s "$work/big12/train.bin") / 1024))
if ! [[ "$small" =~ ^[0-9]+$ && "$large" =~ ^[0-9]+$ ]]; then
  fail "no peak memory measured (/usr/bin/time)"
elif [ $((large - small)) -lt $((file_kb / 10)) ]; then
  echo "ok: peak memory does not follow the file size"
else
  fail "peak memory grew by $(((large - small) / 1024)) MB with 100 MB more tokens"
fi
rm -rf "$work/big12" "$work/big24"

# Bad input.
bad() {  # expected-message dir
  "$loom" train "$cfg" "${cache[@]}" --set run.out_dir="$work/bad" "${bpe[@]}" --set data.dataset=\"tokens\" \
    --set data.path=\"$2\" --set data.tokenizer=\"$work/kjv.bpe\" > "$work/bad.log" 2>&1 && fail "$2 was accepted"
  grep -q "$1" "$work/bad.log" && echo "ok: $(grep -o "token [fd][ia][lt][ea].*" "$work/bad.log" | head -1)" ||
    fail "no '$1' for $2: $(tail -1 "$work/bad.log")"
  [ -z "$(ls -A "$work/bad/tiny_gpt" 2> /dev/null | grep -v '^.lock$')" ] ||
    fail "bad input $2 left files in the run directory: $(ls -A "$work/bad/tiny_gpt")"
}
cp -r "$work/tok-64" "$work/cut" && truncate -s -3 "$work/cut/train.bin"
bad "truncated or corrupt" "$work/cut"
cp -r "$work/tok-64" "$work/magic" && printf 'JUNK' | dd of="$work/magic/val.bin" conv=notrunc 2> /dev/null
bad "header starts" "$work/magic"
# Tokens of another tokenizer (bytes) under a run whose data.tokenizer is the BPE: every id is
# in the vocabulary, yet they would be read as other text.
"$loom" data prepare --input "$work/genesis.txt" --out "$work/genesis-bytes" > /dev/null
bad "genesis-bytes was prepared with the tokenizer bytes (256 tokens), not with this run's" "$work/genesis-bytes"
"$loom" train "$cfg" "${cache[@]}" --set run.out_dir="$work/bad" --set data.dataset=\"tokens\" \
  --set data.path=\"$work/tok-64\" > "$work/bad.log" 2>&1 && fail "512-token data trained a 256-token model"
grep -q "outside the vocabulary of 256" "$work/bad.log" && echo "ok: tokens outside the vocabulary" ||
  fail "no vocabulary error: $(tail -1 "$work/bad.log")"
"$loom" data prepare --input "$work/kjv.txt" --out "$work/tok-64" > "$work/bad.log" 2>&1 &&
  fail "data prepare overwrote a directory"
grep -q "exists; remove it" "$work/bad.log" || fail "no 'exists' error: $(cat "$work/bad.log")"
ls "$work" | grep -q partial && fail "a .partial directory was left behind"

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo PASS
