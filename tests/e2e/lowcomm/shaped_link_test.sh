#!/usr/bin/env bash
# DiLoCo over a real, slow link: 2 workers in network namespaces of their own, joined by links
# shaped to 10 Mbit/s and 20 ms each way (netem, or where the kernel has none tbf and the delay
# line, loom_delay_line beside LOOM_BINARY), MPI over TCP between them
# (tests/e2e/lowcomm/netns_rig.sh). The tiny GPT, H = 4, 8 steps:
#   - a UDP round trip between the workers (4 crossings of a link) takes 80 ms or more;
#   - the run completes across the namespaces;
#   - what crossed worker 2's link (its interface counter) is at least what rank 1 counted it
#     sent (the count is a lower bound) and at most a quarter more plus 64 kB (TCP/IP and MPI
#     headers, the daemons' own traffic);
#   - an outer step takes at least its bytes' time on the shaped link and one crossing from
#     worker to worker (the shaping is real);
#   - nothing of the rig is left afterwards.
# Skipped (exit 77) where network namespaces cannot be made (not root, no CAP_SYS_ADMIN); under
# CI=true a process that holds CAP_SYS_ADMIN and still cannot make them fails instead.
# Usage: shaped_link_test.sh LOOM_BINARY MPIRUN WORK_DIR
set -uo pipefail
loom=$1 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE LOOM_FAULT=
. "$here/netns_rig.sh"
if ! why=$(rig_check); then
  cap_sys_admin=$(( 0x$(awk '/^CapEff:/ { print $2 }' /proc/self/status) >> 21 & 1 ))
  if [ "${CI:-}" = true ] && [ "$(id -u)" = 0 ] && [ "$cap_sys_admin" = 1 ]; then
    echo "FAIL: root with CAP_SYS_ADMIN, yet the rig cannot run: $why"
    exit 1
  fi
  echo "skipped: $why"
  exit 77
fi
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

RIG_DELAY_LINE=$(dirname "$loom")/loom_delay_line
rig_up 2 10mbit 20ms || { echo "FAIL: the rig did not come up"; exit 1; }
echo "link: $RIG_SHAPE"
[ "$RIG_DELAYED" = 1 ] || fail "no delay on the links"
# A UDP echo in worker 2, five round trips from worker 1.
ip netns exec "$RIG-w2" /usr/bin/python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('$RIG_NET.2', 9999)); s.settimeout(20)
for _ in range(5):
    data, peer = s.recvfrom(64); s.sendto(data, peer)" &
echo_pid=$!
ip netns exec "$RIG-w1" /usr/bin/python3 - "$RIG_NET.2" <<'PY' || fail "round trips do not match the delay"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
rtts = []
for i in range(5):
    for _ in range(50):  # until the echo listens
        t = time.monotonic(); s.sendto(b"x", (sys.argv[1], 9999))
        try:
            s.recvfrom(64); break
        except socket.timeout:
            pass
    rtts.append(time.monotonic() - t)
print("round trips (ms):", " ".join(f"{r * 1e3:.1f}" for r in rtts))
assert 0.080 <= min(rtts) and max(rtts) <= 2.0, rtts  # the max: a loaded machine
PY
wait $echo_pid
# (A normal run: under 10 s, 30 s on a loaded machine.)
rig_mpirun --timeout 120 "$loom" train "$here/../tiny_gpt.toml" --set run.out_dir="$work" \
  --set train.steps=8 --set train.log_every=1 --set model.depth=2 --set train.batch_size=8 \
  --set eval.every=0 --set sample.tokens=0 --set lowcomm.method=diloco --set lowcomm.workers=2 \
  --set lowcomm.inner_steps=4 > "$work/run.log" 2>&1 || {
  fail "the run failed"
  rig_health
  grep -v '^step ' "$work/run.log" | tail -30
  tail -n 5 "$work"/tiny_gpt/logs/rank-*.log 2> /dev/null
}
tx=$(rig_tx_bytes 2)
/usr/bin/python3 - "$work/tiny_gpt" "$tx" 10e6 0.040 <<'PY' || fail "bytes or times do not match the link"
import json, sys
run, tx, rate, crossing = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
lines = [json.loads(l) for l in open(f"{run}/logs/metrics-rank-1.jsonl")]
sent = lines[-1]["sent_mb"] * 1e6
print(f"rank 1 counted {sent:.0f} bytes sent; its link carried {tx} ({tx / sent:.2f}x)")
assert sent <= tx <= 1.25 * sent + 65536, (sent, tx)
for m in lines:
    if "outer" in m:
        o = m["outer"]
        floor = o["sent_mb"] * 1e6 * 8 / rate
        print(f"outer step at {m['step']}: {o['sent_mb'] * 1e6:.0f} bytes in {o['seconds']:.3f} s "
              f"(the link needs {floor:.3f} s and a crossing {crossing:.3f} s)")
        assert o["seconds"] >= 0.9 * floor + crossing, o
PY
rig_down
left=$(ip netns list | grep -c "^$RIG-")
[ "$left" = 0 ] || fail "$left namespaces of the rig left behind"
[ $failures = 0 ] && echo "shaped link: all checks passed"
exit $((failures > 0))
