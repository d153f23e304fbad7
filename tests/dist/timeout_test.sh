#!/bin/bash
# A rank that stops answering is reported by the collective timeout, not waited on forever.
# Usage: timeout_test.sh MPIRUN PROBE
set -u
mpirun=$1 probe=$2
fail() { echo "FAIL: $*"; exit 1; }

run() {  # $1: np, $2: mode; sets out, rc, secs
  local start=$SECONDS
  out=$("$mpirun" --oversubscribe -np "$1" "$probe" "$2" 2>&1)
  rc=$?
  secs=$((SECONDS - start))
}

run 3 collective
echo "$out" | grep "loom: error" | head -3
[ "$rc" -ne 0 ] || fail "collective: job exited 0"
[ "$secs" -lt 40 ] || fail "collective: took ${secs}s (timeout is 2s)"
echo "$out" | grep -q "all_reduce #2 on group world (world ranks 0, 1, 2) did not finish within 2 s" ||
  fail "collective: no message naming the operation: $out"
echo "$out" | grep -q "ranks that had not arrived: 1 (last reached #1)" ||
  fail "collective: rank 1 not named: $out"
echo "$out" | grep -q "not aborted" && fail "collective: a rank went on"

run 3 stopped
echo "$out" | grep "loom: error" | head -3
[ "$rc" -ne 0 ] || fail "stopped: job exited 0"
[ "$secs" -lt 40 ] || fail "stopped: took ${secs}s"
echo "$out" | grep -q "ranks that did not answer (stopped, hung or dead): 1" ||
  fail "stopped: rank 1 not named: $out"

run 2 recv
echo "$out" | grep "loom: error" | head -3
[ "$rc" -ne 0 ] || fail "recv: job exited 0"
[ "$secs" -lt 40 ] || fail "recv: took ${secs}s"
echo "$out" | grep -q "recv from rank 1 (tag 5) on group world (world ranks 0, 1) did not finish" ||
  fail "recv: no message naming the transfer: $out"
echo "$out" | grep -q "the peer is alive but has not posted the matching call" ||
  fail "recv: diagnosis missing: $out"
echo "PASS"
