#!/usr/bin/env bash
# Builds ferry's libFuzzer targets (fuzz/) with clang under ASan+UBSan in a
# build directory of their own and runs each for N seconds, one at a time.
# docs/fuzzing.md says what each target covers and records the runs.
#
# Usage: scripts/fuzz.sh [--seconds N] [--smoke] [--build-dir DIR] [TARGET...]
#   --seconds N   run each target N seconds (default 600)
#   --smoke       CI's run (ctest's fuzz.smoke): 5 seconds each unless
#                 --seconds says otherwise; exits 77 (skipped) where clang
#                 or libFuzzer is missing
#   --build-dir   default: build-fuzz at the top of the tree
#   TARGET        wire handshake store tcp_frame shm_ring fabric_msg (default: all built)
# Each run reads the seeds (fuzz/corpus/T) and the inputs of fixed findings
# (fuzz/regressions/T), grows a corpus of its own in BUILD/corpus/T (not in
# the tree), and writes what breaks a target to BUILD/findings/T/. A table
# of targets, seconds, executions and results ends the output and is kept
# in BUILD/fuzz-summary.txt. Exit status: 0 when every run was clean.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=""
smoke=0
build="$root/build-fuzz"
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ -z "$seconds" ]; then
  if [ "$smoke" = 1 ]; then seconds=5; else seconds=600; fi
fi

cc=$(command -v clang || command -v clang-14 || true)
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cc" ] || [ -z "$cxx" ]; then
  echo "fuzz.sh: clang is not installed (scripts/setup-deps.sh installs it); fuzzers skipped"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
  > "$probe/p.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz.sh: $cxx cannot link libFuzzer with ASan+UBSan (libfuzzer-14-dev?); fuzzers skipped"
  sed 's/^/  /' "$probe/err" | head -5
  exit 77
fi

# A build of the fuzzers only: no tests, no benchmarks, no link-time
# optimisation (the fuzzers link the plugins' helper library), no warnings
# as errors (clang's warnings are not the gcc build's; that one keeps -Werror).
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DFERRY_BUILD_FUZZERS=ON \
  -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF -DFERRY_WERROR=OFF \
  -DFERRY_PLUGIN_LTO=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
all=(wire handshake store tcp_frame shm_ring fabric_msg)
if [ ${#targets[@]} -eq 0 ]; then
  for t in "${all[@]}"; do
    if grep -q "^build bin/fuzz-$t:" "$build/build.ninja" 2>/dev/null ||
       ninja -C "$build" -t targets all 2>/dev/null | grep -q "^bin/fuzz-$t:"; then
      targets+=("$t")
    else
      echo "fuzz.sh: target $t is not configured (see $build/configure.log); skipped"
    fi
  done
fi
cmake --build "$build" -j "${FERRY_FUZZ_BUILD_JOBS:-2}" --target "${targets[@]/#/fuzz-}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary="$build/fuzz-summary.txt"
printf '%-11s %8s %12s  %s\n' target seconds executions result > "$summary"
rc=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings"
  inputs=("$root/fuzz/corpus/$t")
  if [ -d "$root/fuzz/regressions/$t" ]; then inputs+=("$root/fuzz/regressions/$t"); fi
  log="$build/fuzz-$t.log"
  echo "fuzz.sh: $t for ${seconds}s (log: $log)"
  set +e
  "$build/bin/fuzz-$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" "${inputs[@]}" >"$log" 2>&1
  status=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$status" = 0 ]; then
    result=clean
  else
    result="FAILED (exit $status; input in $findings, log $log)"
    rc=1
    grep -m1 -A12 -E "ERROR:|runtime error|fuzz check failed" "$log" || tail -20 "$log"
  fi
  printf '%-11s %8s %12s  %s\n' "$t" "$seconds" "${execs:-?}" "$result" >> "$summary"
done
cat "$summary"
exit "$rc"
