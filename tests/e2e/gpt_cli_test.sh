#!/usr/bin/env bash
# End-to-end checks of the `loom` CLI for the GPT language model on the tiny GPT config:
#   - a run of 2N steps equals a run of N steps + --resume + N steps, bit for bit (also with Muon
#     on a hybrid of Mamba-2 and attention blocks);
#   - eval.json, metrics.jsonl with held-out losses, `loom eval` and `loom sample` on a checkpoint;
#   - `loom tokenizer train` / `check` (round trip) and a run on BPE tokens;
#   - bad input ends with one clear error line and exit status 1, never a crash (Muon offloaded
#     under ZeRO, an unknown optimizer, a Muon key without Muon, a mixer pattern with other
#     letters).
# Usage: gpt_cli_test.sh LOOM_BINARY WORK_DIR
set -euo pipefail
loom=$1
work=$2
here=$(cd "$(dirname "$0")" && pwd)
cfg=$here/tiny_gpt.toml
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# kjv.txt is produced once into the work directory, not into the user's cache.
cache=(--set data.cache_dir="$work/cache")
# Compared runs share one run id: it is recorded in every checkpoint (trainer_state.json).
id=(--set run.id=cmp)

# --- resume is bit-identical ---
"$loom" train "$cfg" "${cache[@]}" "${id[@]}" --set run.out_dir="$work/a" > "$work/a.log"
"$loom" train "$cfg" "${cache[@]}" "${id[@]}" --set run.out_dir="$work/b" --set train.stop_after=3 > "$work/b1.log"
"$loom" train "$cfg" "${cache[@]}" --set run.out_dir="$work/b" --resume > "$work/b2.log"
grep -q "resumed from .*step-000003 at step 3" "$work/b2.log" || fail "second run did not resume at step 3"
# The rank file holds every tensor (model, EMA, optimizer); the manifest their checksums.
for f in rank-00000.safetensors manifest.json; do
  if cmp -s "$work/a/tiny_gpt/step-000006/$f" "$work/b/tiny_gpt/step-000006/$f"; then
    echo "ok: $f identical after 6 steps and after 3 + resume + 3"
  else
    fail "$f differs between the uninterrupted and the resumed run"
  fi
done
# The same with Muon (its momentum in the optimizer state) on a hybrid of Mamba-2 and attention.
muon=(--set 'optim.name="muon"' --set model.style=llama --set 'model.mixers="MA"'
  --set model.depth=2 --set model.ssm_state=8 --set model.ssm_head_dim=16 --set model.ssm_chunk=4)
"$loom" train "$cfg" "${cache[@]}" "${id[@]}" "${muon[@]}" --set run.out_dir="$work/ma" > "$work/ma.log"
"$loom" train "$cfg" "${cache[@]}" "${id[@]}" "${muon[@]}" --set run.out_dir="$work/mb" \
  --set train.stop_after=3 > "$work/mb1.log"
"$loom" train "$cfg" "${cache[@]}" "${muon[@]}" --set run.out_dir="$work/mb" --resume > "$work/mb2.log"
grep -q "resumed from .*step-000003 at step 3" "$work/mb2.log" || fail "muon: did not resume at step 3"
for f in rank-00000.safetensors manifest.json; do
  cmp -s "$work/ma/tiny_gpt/step-000006/$f" "$work/mb/tiny_gpt/step-000006/$f" &&
    echo "ok: muon hybrid: $f identical after 6 steps and after 3 + resume + 3" ||
    fail "muon hybrid: $f differs between the uninterrupted and the resumed run"
done
grep -q '"model_kind": "gpt"' "$work/a/tiny_gpt/step-000006/trainer_state.json" || fail "trainer_state.json lacks model_kind gpt"
[ "$(wc -l < "$work/a/tiny_gpt/metrics.jsonl")" -ge 3 ] || fail "metrics.jsonl too short"
grep -q '"val":{"nats_per_token"' "$work/a/tiny_gpt/metrics.jsonl" || fail "metrics.jsonl has no held-out loss"
grep -q "tok/s" "$work/a.log" || fail "no tok/s on the progress line"
[ -s "$work/a/tiny_gpt/eval.json" ] || fail "no eval.json"
grep -q "final held-out loss at step 6: .* nats/token, .* nats/byte, .* bits/byte" "$work/a.log" ||
  fail "no final held-out loss printed"

# --- loom eval prints the held-out loss of a checkpoint: the same as eval.json at the end ---
want=$(sed -n 's/.*"nats_per_token": \([0-9.e+-]*\).*/\1/p' "$work/a/tiny_gpt/eval.json")
want=$(printf "%.4f" "$want")
"$loom" eval "$work/a/tiny_gpt/step-000006" > "$work/eval.log"
cat "$work/eval.log"
grep -q '"checkpoint": ".*step-000006"' "$work/a/tiny_gpt/eval-step-000006.json" ||
  fail "loom eval wrote no eval.json into the run directory"
grep -q "held-out loss of .*: $want nats/token, [0-9.]* nats/byte, [0-9.]* bits/byte" "$work/eval.log" ||
  fail "loom eval does not print the loss of eval.json ($want nats/token)"
"$loom" eval "$work/a/tiny_gpt/step-000006" --windows 3 --out "$work/w3.json" | grep -q "(3 windows, 48 tokens, 48 bytes)" ||
  fail "loom eval --windows 3 did not evaluate 3 windows of 16 tokens"
grep -q '"windows": 3' "$work/w3.json" || fail "loom eval --out wrote no figures"

# --- loom sample continues a prompt (greedy is deterministic) ---
"$loom" sample "$work/a/tiny_gpt/step-000006" --prompt "In the beginning" --tokens 12 --temperature 0 > "$work/s1.txt"
"$loom" sample "$work/a/tiny_gpt/step-000006" --prompt "In the beginning" --tokens 12 --temperature 0 > "$work/s2.txt"
grep -q "^In the beginning" "$work/s1.txt" || fail "sample does not start with the prompt"
cmp -s "$work/s1.txt" "$work/s2.txt" || fail "greedy sampling is not deterministic"
# Without the KV cache (the whole window each token): the same text; the rate on stderr.
"$loom" sample "$work/a/tiny_gpt/step-000006" --prompt "In the beginning" --tokens 12 --temperature 0 \
  --no-kv-cache > "$work/s3.txt" 2> "$work/s3.err"
cmp -s "$work/s1.txt" "$work/s3.txt" || fail "the KV cache changes the greedy text"
grep -q "new tokens/s (no cache" "$work/s3.err" || fail "sample printed no rate: $(cat "$work/s3.err")"
"$loom" sample "$work/a/tiny_gpt/step-000006" --prompt "In the beginning" --tokens 12 --top-k 1 \
  > "$work/s4.txt" || fail "sample --top-k failed"
cmp -s "$work/s1.txt" "$work/s4.txt" || fail "top-k 1 is not greedy"
"$loom" sample "$work/a/tiny_gpt/step-000006" --prompt "In" --top-p 1.5 > /dev/null 2> "$work/s5.err" &&
  fail "top-p 1.5 was accepted"
grep -q "top_p in (0, 1\]" "$work/s5.err" || fail "no clear error for top-p 1.5: $(cat "$work/s5.err")"

# --- tokenizer: train, round trip, train a GPT on its tokens ---
kjv=$work/cache/kjv.txt
head -c 200000 "$kjv" > "$work/head.txt"
tail -c 50000 "$kjv" > "$work/tail.txt"
"$loom" tokenizer train --input "$work/head.txt" --vocab 300 --out "$work/tok300.bpe" > "$work/tok.log"
grep -q "tokenizer: 300 tokens (44 merges)" "$work/tok.log" || fail "tokenizer train: $(cat "$work/tok.log")"
"$loom" tokenizer check --tokenizer "$work/tok300.bpe" --input "$work/tail.txt" > "$work/check.log" ||
  fail "tokenizer round trip failed"
grep -q "round trip ok" "$work/check.log" && echo "ok: $(cat "$work/check.log")"
"$loom" tokenizer train --kjv --cache-dir "$work/cache" --vocab 260 --out "$work/kjv260.bpe" > /dev/null
[ -s "$work/kjv260.bpe" ] || fail "tokenizer train --kjv wrote no file"
bpe=(--set data.dataset=text --set data.path="$work/head.txt" --set data.val_fraction=0.05
     --set data.tokenizer="$work/tok300.bpe" --set model.vocab_size=300)
"$loom" train "$cfg" --set run.out_dir="$work/bpe" "${bpe[@]}" > "$work/bpe.log"
# BPE tokens are longer than a byte: fewer tokens than bytes in the final evaluation.
tokens=$(sed -n 's/.*"tokens": \([0-9]*\).*/\1/p' "$work/bpe/tiny_gpt/eval.json")
bytes=$(sed -n 's/.*"bytes": \([0-9]*\).*/\1/p' "$work/bpe/tiny_gpt/eval.json")
[ "$tokens" -gt 0 ] && [ "$bytes" -gt "$tokens" ] || fail "BPE run: eval.json has $tokens tokens, $bytes bytes"
[ -s "$work/bpe/tiny_gpt/tokenizer.bpe" ] || fail "BPE run: no tokenizer.bpe in the run directory"
"$loom" eval "$work/bpe/tiny_gpt/step-000006" | grep -q "held-out loss of" || fail "loom eval of the BPE run"
echo "ok: BPE run ($tokens held-out tokens, $bytes bytes)"

# --- a DiT checkpoint, to check the model-kind errors ---
"$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/dit" --set train.stop_after=1 > /dev/null

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
  if ! grep -q "^loom: error: " "$work/err.log"; then fail "$what: not a 'loom: error:' line: $(cat "$work/err.log")"; return; fi
  if ! grep -q -- "$pattern" "$work/err.log"; then fail "$what: error does not mention '$pattern': $(cat "$work/err.log")"; return; fi
  echo "ok: $what -> $(cat "$work/err.log")"
}
run=(--set run.out_dir="$work/c")
expect_error "missing text file" "$work/missing.txt" -- "$loom" train "$cfg" "${run[@]}" --set data.dataset=text --set data.path="$work/missing.txt"
expect_error "text dataset without a path" "data.path" -- "$loom" train "$cfg" "${run[@]}" --set data.dataset=text
expect_error "tokenizer/vocab mismatch" "tok300.bpe has 300 tokens but model.vocab_size is 256" -- "$loom" train "$cfg" "${run[@]}" "${cache[@]}" --set data.tokenizer="$work/tok300.bpe"
expect_error "bytes/vocab mismatch" "\"bytes\" has 256 tokens but model.vocab_size is 300" -- "$loom" train "$cfg" "${run[@]}" --set model.vocab_size=300
expect_error "missing tokenizer file" "$work/nope.bpe" -- "$loom" train "$cfg" "${run[@]}" "${cache[@]}" --set data.tokenizer="$work/nope.bpe"
expect_error "unknown config key" "unknown key train.stepz" -- "$loom" train "$cfg" "${run[@]}" --set train.stepz=5
expect_error "DiT model key in a gpt config" "unknown key model.patch" -- "$loom" train "$cfg" "${run[@]}" --set model.patch=2
expect_error "DiT section in a gpt config" "unknown key diffusion.label_dropout" -- "$loom" train "$cfg" "${run[@]}" --set diffusion.label_dropout=0.1
expect_error "gpt key in a DiT config" "unknown key model.vocab_size" -- "$loom" train "$here/tiny_dit.toml" "${run[@]}" --set model.vocab_size=256
expect_error "unknown model kind" "model.kind 'rnn'" -- "$loom" train "$cfg" "${run[@]}" --set model.kind=rnn
expect_error "unknown dataset" "data.dataset 'mnist'" -- "$loom" train "$cfg" "${run[@]}" --set data.dataset=mnist
expect_error "wrong-type value" "model.width must be an integer" -- "$loom" train "$cfg" "${run[@]}" --set 'model.width="wide"'
expect_error "bad value" "not divisible by heads" -- "$loom" train "$cfg" "${run[@]}" --set model.width=33
expect_error "muon offloaded under zero2" "with optim.offload under parallel.data_parallel \"zero2\" is not built" -- \
  "$loom" train "$cfg" "${run[@]}" --set 'optim.name="muon"' --set 'parallel.data_parallel="zero2"' \
  --set optim.offload=true
expect_error "unknown optimizer" "optim.name 'sgd' is not known (adamw or muon)" -- \
  "$loom" train "$cfg" "${run[@]}" --set 'optim.name="sgd"'
expect_error "muon key without muon" "unknown key optim.muon_steps" -- \
  "$loom" train "$cfg" "${run[@]}" --set optim.muon_steps=3
expect_error "bad mixer pattern" "mixers 'MAX' must be a pattern of A (attention) and M (Mamba-2)" -- \
  "$loom" train "$cfg" "${run[@]}" --set 'model.mixers="MAX"'
want_status=3 expect_error "resume from a DiT run" "model.kind: 'dit' -> 'gpt'" -- "$loom" train "$cfg" "${cache[@]}" --set run.out_dir="$work/dit" --set run.name=tiny_dit --resume
expect_error "eval of a DiT checkpoint with a missing classifier" "classifier" -- "$loom" eval "$work/dit/tiny_dit/step-000001" --classifier "$work/no_classifier"
expect_error "eval: not a checkpoint" "trainer_state.json" -- "$loom" eval "$work"
expect_error "tokenizer train without input" "--input FILE and --kjv" -- "$loom" tokenizer train --vocab 300 --out "$work/x.bpe"
expect_error "tokenizer train: missing input" "$work/missing.txt" -- "$loom" tokenizer train --input "$work/missing.txt" --vocab 300 --out "$work/x.bpe"
expect_error "tokenizer check: not a tokenizer" "head.txt" -- "$loom" tokenizer check --tokenizer "$work/head.txt" --input "$work/tail.txt"

if [ $failures -ne 0 ]; then echo "$failures failed"; exit 1; fi
echo "all GPT CLI checks passed"
