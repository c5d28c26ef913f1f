#!/usr/bin/env bash
# Builds and runs the whole test suite under a sanitizer, in its own build
# directory. Usage: scripts/sanitize.sh address|thread
#   address: ASan + UBSan (build-asan)     thread: TSan (build-tsan)
# Not part of CI's run (CI has 90 minutes on 2 cores); run it before
# resolving anything that touches concurrency.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:-}
case "$kind" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *) echo "usage: $0 address|thread" >&2; exit 2 ;;
esac
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# history_size=7: the longest access history, so that the earlier side of a
# race keeps its stack (a suppression can match only a stack it sees).
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$root/scripts/tsan-suppressions.txt}
# A conformance test is reported as a hang after 120 s; under TSan on two
# loaded cores, 110 libfabric init/fini cycles (LIFE-1) take about that.
export FERRY_CONFORMANCE_TEST_TIMEOUT=${FERRY_CONFORMANCE_TEST_TIMEOUT:-480}
exec "$root/scripts/test.sh" "$root/$dir" -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE="$kind" -DFERRY_BUILD_BENCH=OFF
