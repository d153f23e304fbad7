#!/usr/bin/env bash
# Decentralized diffusion experts against one DiT at the same training compute, on
# Fashion-MNIST with the DiT of configs/dit_fmnist.toml: `loom cluster` splits the 60000
# training images into K = 4 clusters by the shipped classifier's features; K experts train in
# isolation, STEPS / K steps each on their cluster, and one DiT STEPS steps on all of it: the
# same model, batch and number of steps in all, so the same FLOPs (the router's are reported
# beside). Two routers (time-conditioned ViTs) learn the cluster of a noisy image: one from
# (x_t, t) alone, as in the paper, and one told the class being sampled too (model.labels).
# Each is then judged by the shipped classifier on SAMPLES class-balanced samples (25 Euler
# steps, cfg 2): class accuracy and FID over the real-data floor, for the monolithic DiT and the
# experts under full, top-1 and top-2 routing by each router.
# Usage: bench/lowcomm/experts_vs_monolithic.sh [STEPS [SAMPLES]]   (4000 and 500)
set -euo pipefail
steps=${1:-4000} samples=${2:-500} K=4
root=$(cd "$(dirname "$0")/../.." && pwd)
loom=$root/build/loom
work=${WORK:-/tmp/loom-experts}
rm -rf "$work" && mkdir -p "$work"
common=(--set train.max_minutes=0 --set train.ckpt_every=0 --set train.log_every=500
  --set train.ema_decay=0.995 --set sample.per_class=1 --set run.out_dir="$work/runs")
"$loom" cluster --k $K --out "$work/clusters.npy" --classifier "$root/assets/fmnist_classifier" |
  tee "$work/cluster.log"
"$loom" train "$root/configs/dit_fmnist.toml" "${common[@]}" --set run.name=monolithic \
  --set train.steps=$steps --set eval.classifier="" > "$work/monolithic.log" 2>&1
experts=()
for k in $(seq 0 $((K - 1))); do
  "$loom" train "$root/configs/dit_fmnist.toml" "${common[@]}" --set run.name=expert$k \
    --set train.steps=$((steps / K)) --set eval.classifier="" --set data.clusters="$work/clusters.npy" \
    --set data.cluster=$k > "$work/expert$k.log" 2>&1
  experts+=("$work/runs/expert$k")
done
cat > "$work/router.toml" <<TOML
[run]
name = "router"
[model]
kind = "dit_router"
patch = 4
width = 64
depth = 2
heads = 2
num_classes = $K
[data]
clusters = "$work/clusters.npy"
[train]
steps = $((steps / 4))
batch_size = 32
log_every = 500
[optim]
lr = 1e-3
TOML
"$loom" train "$work/router.toml" --set run.out_dir="$work/runs" > "$work/router.log" 2>&1
"$loom" train "$work/router.toml" --set run.out_dir="$work/runs" --set run.name=router_labels \
  --set model.labels=10 > "$work/router_labels.log" 2>&1
list=$(IFS=,; echo "${experts[*]}")
eval_args=(--samples $samples --steps 25 --cfg 2 --classifier "$root/assets/fmnist_classifier")
"$loom" eval "$work/runs/monolithic" "${eval_args[@]}" > "$work/eval-monolithic.log" 2>&1
for router in router router_labels; do
  for routing in full top1 top2; do
    "$loom" eval "$work/runs/$router" --experts "$list" --routing $routing "${eval_args[@]}" \
      > "$work/eval-$router-$routing.log" 2>&1
  done
done
grep -h "^dit:\|^dit_router:\|^data:\|^trained\|^router:" "$work"/monolithic.log "$work"/expert*.log \
  "$work"/router*.log
tail -qn 1 "$work"/eval-*.log
