#!/usr/bin/env bash
# Dense against mixture-of-experts GPT on the KJV text at equal training compute, and what
# balancing does. The GPT of configs/gpt_kjv.toml (llama style, width 128, depth 4, SwiGLU MLP
# of 384 hidden units), STEPS steps of 4 x 256 bytes, four runs on the same data and seed:
#   dense         the config as it is
#   moe-auxfree   every MLP a mixture of 8 SwiGLU experts of 192 hidden units, top 2: the same
#                 active parameters and FLOPs per token as the dense MLP (plus the router's
#                 8 x 128); aux-loss-free balancing (moe.bias_rate 1e-3), z-loss 1e-3
#   moe-switch    the same with the Switch auxiliary loss (moe.aux_loss 1e-2) instead
#   moe-none      the same with no balancing at all (no bias, no auxiliary or z-loss)
# Equal steps and tokens with equal active FLOPs per token: equal training compute. Prints one
# table row per run: the held-out loss over the whole held-out split, the parameters (total,
# active per token), the mean over steps after the first 10% of max / mean expert load (mean
# over the layers; every step logged), and the training throughput.
#   bench/moe/dense_vs_moe.sh [STEPS [OUT_DIR]]      (defaults: 4000, /tmp/loom-moe-bench)
set -euo pipefail
steps=${1:-4000}
out=${2:-/tmp/loom-moe-bench}
here=$(cd "$(dirname "$0")/../.." && pwd)
loom=$here/build/loom
mkdir -p "$out"
moe=(--set moe.experts=8 --set moe.top_k=2 --set moe.hidden=192)
for run in dense moe-auxfree moe-switch moe-none; do
  case $run in
    dense) extra=() ;;
    moe-auxfree) extra=("${moe[@]}" --set moe.aux_loss=0 --set moe.z_loss=0.001 --set moe.bias_rate=0.001) ;;
    moe-switch) extra=("${moe[@]}" --set moe.aux_loss=0.01 --set moe.z_loss=0.001 --set moe.bias_rate=0) ;;
    moe-none) extra=("${moe[@]}" --set moe.aux_loss=0 --set moe.z_loss=0 --set moe.bias_rate=0) ;;
  esac
  [ -f "$out/$run/gpt_kjv/eval.json" ] && continue  # done in an earlier call
  "$loom" train "$here/configs/gpt_kjv.toml" --overwrite --set run.out_dir="$out/$run" \
    --set train.steps="$steps" --set train.max_minutes=0 --set train.log_every=1 \
    --set train.ckpt_every=0 --set eval.every=0 --set sample.tokens=0 "${extra[@]}" \
    > "$out/$run.log" 2>&1
done
/usr/bin/python3 - "$out" "$steps" <<'PY'
import json, re, sys
out, steps = sys.argv[1], int(sys.argv[2])
print(f"| run | held-out nats/byte | parameters (active per token) | max/mean load after {steps // 10} steps | tok/s |")
print("|---|---|---|---|---|")
for run in ["dense", "moe-auxfree", "moe-switch", "moe-none"]:
    ev = json.load(open(f"{out}/{run}/gpt_kjv/eval.json"))
    log = open(f"{out}/{run}.log").read()
    params = re.search(r"gpt \(llama\): (\d+) parameters(?: \((\d+) active)?", log)
    total, active = int(params.group(1)), int(params.group(2) or params.group(1))
    rate = float(re.search(r"in .* of steps: ([0-9.]+) tok/s", log).group(1))
    ratios = [json.loads(l)["moe"]["max_over_mean"] for l in open(f"{out}/{run}/gpt_kjv/metrics.jsonl")
              if '"moe"' in l and json.loads(l)["step"] > steps // 10]
    load = f"{sum(ratios) / len(ratios):.3f}" if ratios else "-"
    print(f"| {run} | {ev['nats_per_byte']:.4f} | {total / 1e6:.2f}M ({active / 1e6:.2f}M) | {load} | {rate:.0f} |")
PY
