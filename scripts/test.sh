#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest: unit tests,
# ABI checks, conformance of every in-tree plugin, the out-of-tree plugin
# build, benchmark smoke runs). Prints a closing summary line.
# Usage: scripts/test.sh [BUILD_DIR] [cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true

"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh" "$build" "$@"

cd "$build"
# Tests send only to this machine's loopback: libfabric's tcp provider would
# otherwise bind the first interface it finds (eth0).
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
# Tests that busy-poll hold the ctest resource lock "busy_poll", so even with
# -j they never spin against each other on a 2-core machine.
set +e
ctest --output-on-failure -j "${FERRY_TEST_JOBS:-2}" --timeout 600 2>&1 | tee ctest.log
rc=${PIPESTATUS[0]}
set -e
total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' ctest.log | tail -1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p' ctest.log | tail -1)
total=${total:-0}; failed=${failed:-0}
if [ "$total" = 0 ]; then
  echo "ferry tests: no test ran"
  exit 1
fi
echo "ferry tests: $((total - failed)) passed, $failed failed"
exit "$rc"
