# Shared by the parallel end-to-end tests (sourced after setting loom, mpirun, work and here):
# failure counting, parity with one process, and the check that a bad layout fails early.
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# parity LABEL REFERENCE_RUN RUN: losses to 1e-5 relative, final weights and AdamW moments to
# 1e-4 (compare_runs.py prints the measured differences); PARITY_RTOL and PARITY_WEIGHTS_RTOL
# set others (the device's runs against the host's: other kernels, other rounding).
parity() {
  echo -n "$1 vs 1 process: "
  /usr/bin/python3 "$here/compare_runs.py" "$2" "$3" "${PARITY_RTOL:-1e-5}" \
    --weights-rtol="${PARITY_WEIGHTS_RTOL:-1e-4}" || fail "$1: not equal to 1 process"
}

# bad NP EXPECTED ARGS...: `loom train ARGS` on NP processes must exit non-zero with EXPECTED in
# its output and before any training step.
bad() {
  local np=$1 expect=$2; shift 2
  "$mpirun" --oversubscribe -np $np "$loom" train "$@" --set run.out_dir="$work/bad" > "$work/bad.log" 2>&1 &&
    { fail "accepted: $*"; return; }
  grep -q "$expect" "$work/bad.log" || fail "no clear error for $*: $(grep -m2 error "$work/bad.log")"
  grep -q "^step " "$work/bad.log" && fail "work started before the error for $*"
}

# model_config MODEL: the tiny config of gpt2, llama (grouped-query attention), qwen2, hybrid or dit, as cfg (the
# file), extra (its --set arguments) and name (the run's name).
model_config() {
  case $1 in
    dit) cfg=$here/tiny_dit.toml; extra=(--set sample.per_class=1) ;;
    gpt2) cfg=$here/tiny_gpt.toml; extra=(--set eval.every=0 --set sample.tokens=0) ;;
    llama) cfg=$here/tiny_gpt.toml; extra=(--set eval.every=0 --set sample.tokens=0
      --set model.style=llama --set model.kv_heads=2) ;;
    # Llama with Mistral's sliding window: 5 of the 16 positions, across the ranks' chunks.
    mistral) cfg=$here/tiny_gpt.toml; extra=(--set eval.every=0 --set sample.tokens=0
      --set model.style=llama --set model.kv_heads=2 --set model.sliding_window=5) ;;
    # The hybrid on the scan kernels (checkpoints every 4 steps) instead of the chunked form.
    hybridk) cfg=$here/tiny_gpt.toml; extra=(--set eval.every=0 --set sample.tokens=0
      --set model.style=llama --set 'model.mixers="MA"' --set model.ssm_state=8
      --set model.ssm_head_dim=8 --set model.ssm_groups=4 --set model.ssm_chunk=4
      --set 'model.ssm_scan="kernel"') ;;
    # Llama with latent attention: latents of 8 for keys/values and for queries, a RoPE part of 4.
    mla) cfg=$here/tiny_gpt.toml; extra=(--set eval.every=0 --set sample.tokens=0
      --set model.style=llama --set model.mla_kv_rank=8 --set model.mla_q_rank=8
      --set model.mla_rope_dim=4) ;;
    qwen2) cfg=$here/tiny_gpt.toml; extra=(--set eval.every=0 --set sample.tokens=0
      --set model.style=llama --set model.kv_heads=2 --set model.qkv_bias=true) ;;
    # Mamba-2 then attention blocks; 8 SSM heads in 4 groups, the scan in chunks of 4 tokens.
    hybrid) cfg=$here/tiny_gpt.toml; extra=(--set eval.every=0 --set sample.tokens=0
      --set model.style=llama --set 'model.mixers="MA"' --set model.ssm_state=8
      --set model.ssm_head_dim=8 --set model.ssm_groups=4 --set model.ssm_chunk=4) ;;
  esac
  name=$(basename "$cfg" .toml)
}

finish() { [ $failures -eq 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }; }
