#!/usr/bin/env bash
# Runs every fuzz target of a LOOM_FUZZ build for SECONDS each, starting from a copy of its
# seed corpus, and prints executions, corpus growth and findings per target.
# Usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET ...]
set -uo pipefail
build=$1 seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(config safetensors manifest idx text)
mkdir -p "$build/findings"
status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  cp -n "$here/corpus/$t"/* "$corpus/" 2>/dev/null
  [ -d "$here/regressions/$t" ] && cp -n "$here/regressions/$t"/* "$corpus/" 2>/dev/null
  log=$build/fuzz-$t.log
  "$build/${t}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t-" "$corpus" > "$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  found=$(ls "$build/findings" | grep -c "^$t-" || true)
  printf "%-12s %4ss  %10s runs  corpus %5s files  exit %d  findings %d\n" "$t" "$seconds" \
    "${execs:-?}" "$(ls "$corpus" | wc -l)" "$rc" "$found"
  if [ $rc -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    grep -m5 -E "ERROR|SUMMARY|runtime error|deadly signal|uncaught" "$log"
  fi
done
exit $status
