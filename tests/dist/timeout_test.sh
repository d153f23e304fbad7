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

# expect NP MODE PATTERN...: the job fails within 40 s and its output holds every pattern.
expect() {
  local np=$1 mode=$2
  shift 2
  run "$np" "$mode"
  echo "$out" | grep "loom: error" | head -3
  [ "$rc" -ne 0 ] || fail "$mode: job exited 0"
  [ "$secs" -lt 40 ] || fail "$mode: took ${secs}s (timeout is 2s)"
  for pattern in "$@"; do
    echo "$out" | grep -qF "$pattern" || fail "$mode: no '$pattern' in: $out"
  done
  echo "$out" | grep -q "not aborted" && fail "$mode: a rank went on"
}

expect 3 collective "all_reduce #2 on group world (world ranks 0, 1, 2) did not finish within 2 s" \
  "ranks that had not arrived: 1 (last reached #1)"
expect 3 stopped "ranks that did not answer (stopped, hung or dead): 1"
expect 2 recv "recv from rank 1 (tag 5) on group world (world ranks 0, 1) did not finish" \
  "the peer is alive but has not posted the matching call"
echo "PASS"
