#!/usr/bin/env bash
# Decentralized diffusion experts through the CLI: `loom cluster` splits 2000 training images
# into 2 clusters by the shipped classifier's features; two tiny DiTs train in isolation, one
# per cluster (data.clusters, data.cluster); a tiny router learns which cluster a noisy image
# comes from; `loom sample` and `loom eval` take the router and its experts as one model under
# every routing, and so does a router told the class being sampled (model.labels). Bad input,
# one clear error each: a router given too few experts, the same expert twice, experts of other
# clusters, no --experts for a router, --experts for a plain DiT, a router without
# data.clusters or with another number of classes, a cluster out of range.
# Usage: experts_test.sh LOOM_BINARY WORK_DIR
set -uo pipefail
loom=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
classifier=$root/assets/fmnist_classifier

"$loom" cluster --k 2 --images 2000 --out "$work/clusters.npy" --classifier "$classifier" \
  > "$work/cluster.log" 2>&1 || { fail "loom cluster failed"; cat "$work/cluster.log"; }
/usr/bin/python3 - "$work/clusters.npy" <<'PY' || fail "the assignments file is not 2000 clusters 0/1"
import sys
import numpy as np
a = np.load(sys.argv[1])
assert a.dtype == np.int64 and a.shape == (2000,) and set(a.tolist()) == {0, 1}, (a.dtype, a.shape)
PY
for k in 0 1; do
  "$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/runs" --set run.name=expert$k \
    --set data.clusters="$work/clusters.npy" --set data.cluster=$k --set train.steps=10 \
    > "$work/expert$k.log" 2>&1 || { fail "expert $k failed"; cat "$work/expert$k.log"; }
  grep -q "data: cluster $k of" "$work/expert$k.log" || fail "expert $k: its cluster not named"
done
cat > "$work/router.toml" <<TOML
[run]
name = "router"
seed = 1
[model]
kind = "dit_router"
patch = 7
width = 32
depth = 1
heads = 2
num_classes = 2
[data]
clusters = "$work/clusters.npy"
[train]
steps = 20
batch_size = 16
log_every = 10
TOML
"$loom" train "$work/router.toml" --set run.out_dir="$work/runs" > "$work/router.log" 2>&1 ||
  { fail "router training failed"; cat "$work/router.log"; }
grep -q "router: accuracy on 2000 training images at t = 0.1" "$work/router.log" ||
  fail "the router reported no accuracy"
r=$work/runs/router e0=$work/runs/expert0 e1=$work/runs/expert1
for routing in full top1 top2; do
  "$loom" sample "$r" --experts "$e1,$e0" --routing $routing --per-class 1 --steps 2 \
    --png "$work/$routing.png" > "$work/sample-$routing.log" 2>&1 ||
    { fail "sample $routing failed"; cat "$work/sample-$routing.log"; }
  [ -s "$work/$routing.png" ] || fail "sample $routing wrote no grid"
done
# A router told the class being sampled too (model.labels): trained and sampled the same way.
"$loom" train "$work/router.toml" --set run.out_dir="$work/runs" --set run.name=router_labels \
  --set model.labels=10 > "$work/router_labels.log" 2>&1 ||
  { fail "labelled router failed"; cat "$work/router_labels.log"; }
"$loom" sample "$work/runs/router_labels" --experts "$e0,$e1" --per-class 1 --steps 2 \
  --png "$work/labels.png" > "$work/sample-labels.log" 2>&1 ||
  { fail "sample with the labelled router failed"; cat "$work/sample-labels.log"; }
"$loom" eval "$r" --experts "$e0,$e1" --routing top2 --samples 20 --steps 2 --classifier "$classifier" \
  > "$work/eval.log" 2>&1 || { fail "eval failed"; cat "$work/eval.log"; }
grep -q "+ 2 experts, top2 routing: class accuracy" "$work/eval.log" || fail "eval printed no quality"

# expect NAME STATUS PATTERN COMMAND...: exits with STATUS and PATTERN in its output.
expect() {
  local name=$1 status=$2 pattern=$3
  shift 3
  "$@" > "$work/$name.log" 2>&1
  local code=$?
  [ $code = "$status" ] || fail "$name: exit status $code, expected $status"
  grep -q -- "$pattern" "$work/$name.log" || { fail "$name: no '$pattern'"; cat "$work/$name.log"; }
}
expect one-expert 1 "routes between 2 clusters, but 1 experts were given" \
  "$loom" sample "$r" --experts "$e0"
expect same-twice 1 "is the expert of cluster 0, which another expert given is too" \
  "$loom" sample "$r" --experts "$e0,$e0"
cp "$work/clusters.npy" "$work/other.npy"
"$loom" train "$here/tiny_dit.toml" --set run.out_dir="$work/runs" --set run.name=stranger \
  --set data.clusters="$work/other.npy" --set data.cluster=1 --set train.steps=2 > /dev/null 2>&1
expect other-clusters 1 "was trained on clusters" "$loom" sample "$r" --experts "$e0,$work/runs/stranger"
expect no-experts 2 "holds a router: name its experts" "$loom" sample "$r"
expect dit-experts 2 "needs a dit_router checkpoint" "$loom" sample "$e0" --experts "$e1"
expect router-no-clusters 1 "model.kind dit_router needs data.clusters" \
  "$loom" train "$work/router.toml" --set data.clusters="" --set run.out_dir="$work/bad"
expect router-classes 1 "model.num_classes 3 must be the number of clusters" \
  "$loom" train "$work/router.toml" --set model.num_classes=3 --set run.out_dir="$work/bad"
expect cluster-range 1 "data.cluster 2: .* has clusters 0..1" \
  "$loom" train "$here/tiny_dit.toml" --set data.clusters="$work/clusters.npy" --set data.cluster=2 \
  --set run.out_dir="$work/bad"

[ $failures = 0 ] && echo "experts: all checks passed"
exit $((failures > 0))
