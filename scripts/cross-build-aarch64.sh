#!/usr/bin/env bash
# Cross-builds ferry for aarch64 with Debian's cross compiler: the core, the
# C API (libferry), the tcp and shm plugins (cuda_ipc too where the CUDA
# headers are) and the tools; installs them
# into a staging prefix; builds the example plugin (examples/c-plugin) out
# of tree against that prefix with the same toolchain; and checks that
# every binary is an AArch64 ELF. A build check: nothing runs on ARM here.
#   scripts/cross-build-aarch64.sh [BUILD_DIR]      (default build-aarch64)
# Exit 77 (skipped) when the cross compiler or the arm64 OpenSSL is missing
# (scripts/setup-deps.sh installs both).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-aarch64}
toolchain=$root/cmake/toolchains/aarch64-linux-gnu.cmake
jobs=${JOBS:-2}

if ! command -v aarch64-linux-gnu-g++ >/dev/null; then
  echo "cross-build-aarch64: skipped: aarch64-linux-gnu-g++ not installed (g++-aarch64-linux-gnu)"
  exit 77
fi
if [[ ! -e /usr/lib/aarch64-linux-gnu/libcrypto.so ]]; then
  echo "cross-build-aarch64: skipped: no arm64 OpenSSL (libssl-dev:arm64)"
  exit 77
fi
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== configure $build (aarch64; no tests, benchmarks or Python)"
cmake -S "$root" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF \
  -DFERRY_PYTHON=/nonexistent >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; fail "configure"; }
grep -E "skipped|cuda_ipc" "$build.configure.log" | grep -v "Check for working" || true

echo "== build"
cmake --build "$build" -j "$jobs" >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; fail "build"; }

stage=$build/stage
rm -rf "$stage"
cmake --install "$build" --prefix "$stage" >/dev/null

echo "== the example plugin, out of tree, against the aarch64 SDK"
rm -rf "$build/c-plugin"
cmake -S "$root/examples/c-plugin" -B "$build/c-plugin" -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
  -DCMAKE_PREFIX_PATH="$stage" >/dev/null
cmake --build "$build/c-plugin" -j "$jobs" >/dev/null

echo "== every binary is AArch64"
lib=$(basename "$(dirname "$(find "$stage" -name 'libferry.so.*' | head -n 1)")")
checked=0
for f in "$stage/$lib"/libferry.so.* "$stage/$lib/ferry/plugins"/libferry-tcp.so \
  "$stage/$lib/ferry/plugins"/libferry-shm.so "$stage/bin/ferry" "$stage/bin/ferry-demo" \
  "$build/c-plugin/libferry-uds.so"; do
  [[ -e $f ]] || fail "$f was not built"
  machine=$(readelf -h "$f" | sed -n 's/^ *Machine: *//p')
  printf '  %-60s %s\n' "${f#"$build"/}" "$machine"
  [[ $machine == AArch64 ]] || fail "$f is $machine, not AArch64"
  checked=$((checked + 1))
done
echo "PASS: $checked aarch64 binaries (core, C API, tcp, shm, tools, the example plugin)"
