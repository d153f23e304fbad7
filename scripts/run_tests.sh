#!/usr/bin/env bash
# Runs the test suite (ctest) in a build folder and says where its time went: ctest's own
# closing line, then the 10 slowest tests, any test over the 180 s budget, and every skipped test
# by name. Under CI=true a skipped test fails the run unless it is labelled `gpu` or `netns`
# (it needs a GPU, or CAP_SYS_ADMIN for network namespaces: capabilities a machine can truly
# lack); every other test can run wherever `make test` ran the bootstrap.
#
#   scripts/run_tests.sh BUILD_DIR JOBS [CTEST_ARGS...]     (make test; make test-fast: -L fast)
set -uo pipefail
build=$1 jobs=$2
shift 2
log=$build/Testing/run_tests.log
mkdir -p "$build/Testing"
(cd "$build" && ctest --output-on-failure -j "$jobs" "$@") 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# ctest's result lines: "  12/363 Test  #40: dist.np2 ......   Passed   31.05 sec"
results=$(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' "$log")
echo
echo "The 10 slowest tests (s):"
sort -rn <<< "$results" | head -10 | awk '{ printf "  %8.1f  %s\n", $1, $2 }'
over=$(awk '$1 > 180 { printf " %s (%.0f s)", $2, $1 }' <<< "$results")
[ -z "$over" ] || echo "Over the 180 s budget of one test:$over"

skipped=$(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*\*\*\*(Skipped|Not Run).*/\1/p' "$log" | sort)
if [ -n "$skipped" ]; then
  echo "Skipped: $(echo $skipped)"
  if [ "${CI:-}" = true ]; then
    may_skip=$(cd "$build" && ctest -N -L '^(gpu|netns)$' | sed -nE 's/^ *Test +#[0-9]+: (.+)$/\1/p' | sort)
    not_allowed=$(comm -23 <(echo "$skipped") <(echo "$may_skip"))
    if [ -n "$not_allowed" ]; then
      echo "FAILED: under CI=true these tests may not be skipped (they need neither a GPU nor" \
           "CAP_SYS_ADMIN): $(echo $not_allowed)"
      status=1
    fi
  fi
else
  echo "Skipped: none"
fi
exit "$status"
