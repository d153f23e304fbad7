#!/usr/bin/env bash
# DiLoCo over a real, slow link: 2 workers in network namespaces of their own, joined by veth
# pairs shaped to 10 Mbit/s (netem's 20 ms each way too, where the kernel has netem), MPI over
# TCP between them (tests/e2e/lowcomm/netns_rig.sh). The tiny GPT, H = 4, 8 steps:
#   - the run completes across the namespaces;
#   - what crossed worker 2's link (its interface counter) is at least what rank 1 counted it
#     sent (the count is a lower bound) and at most a quarter more plus 64 kB (TCP/IP and MPI
#     headers, the daemons' own traffic);
#   - an outer step takes at least its bytes' time on the shaped link (the shaping is real);
#   - nothing of the rig is left afterwards.
# Skipped (exit 77) where network namespaces cannot be made (not root, no CAP_SYS_ADMIN).
# Usage: shaped_link_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE LOOM_FAULT=
. "$here/netns_rig.sh"
why=$(rig_check) || { echo "skipped: $why"; exit 77; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

rig_up 2 10mbit 20ms
echo "link: $RIG_SHAPE"
rig_mpirun --timeout 240 "$loom" train "$here/../tiny_gpt.toml" --set run.out_dir="$work" \
  --set train.steps=8 --set train.log_every=1 --set model.depth=2 --set train.batch_size=8 \
  --set eval.every=0 --set sample.tokens=0 --set lowcomm.method=diloco --set lowcomm.workers=2 \
  --set lowcomm.inner_steps=4 > "$work/run.log" 2>&1 || { fail "the run failed"; tail -20 "$work/run.log"; }
tx=$(rig_tx_bytes 2)
/usr/bin/python3 - "$work/tiny_gpt" "$tx" 10e6 <<'PY' || fail "bytes or times do not match the link"
import json, sys
run, tx, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lines = [json.loads(l) for l in open(f"{run}/logs/metrics-rank-1.jsonl")]
sent = lines[-1]["sent_mb"] * 1e6
print(f"rank 1 counted {sent:.0f} bytes sent; its link carried {tx} ({tx / sent:.2f}x)")
assert sent <= tx <= 1.25 * sent + 65536, (sent, tx)
for m in lines:
    if "outer" in m:
        o = m["outer"]
        floor = o["sent_mb"] * 1e6 * 8 / rate
        print(f"outer step at {m['step']}: {o['sent_mb'] * 1e6:.0f} bytes in {o['seconds']:.3f} s "
              f"(the link needs {floor:.3f} s)")
        assert o["seconds"] >= 0.9 * floor, o
PY
rig_down
left=$(ip netns list | grep -c "^$RIG-")
[ "$left" = 0 ] || fail "$left namespaces of the rig left behind"
[ $failures = 0 ] && echo "shaped link: all checks passed"
exit $((failures > 0))
