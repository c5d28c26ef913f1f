#!/usr/bin/env bash
# Proves that a third party can build a transport plugin against the
# *installed* ferry SDK, with nothing from this source tree:
#   1. installs the ferry build at BUILD_DIR into a fresh staging prefix;
#   2. copies examples/c-plugin somewhere else and builds it twice, with
#      CMake (find_package(ferry)) and with its Makefile (pkg-config);
#   3. checks each libferry-uds.so exports exactly ferry_transport_negotiate;
#   4. runs the installed ferry-conformance on each (ctest, make check).
# Usage: scripts/test-c-plugin-out-of-tree.sh BUILD_DIR
# Exits non-zero on the first failure. KEEP_WORK=1 keeps the temporary tree.
set -euo pipefail

if [[ $# -ne 1 || ! -f "$1/CMakeCache.txt" ]]; then
  echo "usage: $0 BUILD_DIR   (a configured and built ferry build tree)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/examples/c-plugin
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-c-plugin.XXXXXX")
if [[ "${KEEP_WORK:-0}" == 1 ]]; then echo "work tree: $work"; else trap 'rm -rf "$work"' EXIT; fi
stage=$work/stage
jobs=${JOBS:-2}

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "install $build into $stage"
cmake --install "$build" --prefix "$stage" >"$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install failed"; }
pc_dir=$(dirname "$(find "$stage" -name ferry.pc -path '*/pkgconfig/*' | head -n 1)")
[[ -f "$pc_dir/ferry.pc" ]] || fail "the SDK did not install ferry.pc"

# A copy outside the source tree: the example must not reach back into it.
cp -r "$src" "$work/c-plugin"

step "build with CMake: find_package(ferry) from CMAKE_PREFIX_PATH=$stage"
cmake -S "$work/c-plugin" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$stage" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$work/cmake-build" -j "$jobs"
cmake_so=$work/cmake-build/libferry-uds.so

step "build with make: pkg-config from PKG_CONFIG_PATH=$pc_dir"
PKG_CONFIG_PATH=$pc_dir make -C "$work/c-plugin" BUILD_DIR="$work/make-build"
make_so=$work/make-build/libferry-uds.so

for so in "$cmake_so" "$make_so"; do
  step "exported symbols of $so"
  [[ -f "$so" ]] || fail "$so was not built"
  exported=$(nm -D --defined-only "$so" | awk '{print $NF}' | sort)
  echo "$exported"
  [[ "$exported" == "ferry_transport_negotiate" ]] ||
    fail "$so must export only ferry_transport_negotiate"
done

[[ -x "$stage/bin/ferry-conformance" ]] || fail "the SDK did not install bin/ferry-conformance"

step "conformance of the CMake build: ctest runs \${FERRY_CONFORMANCE} from the package"
ctest --test-dir "$work/cmake-build" --output-on-failure || fail "conformance failed for $cmake_so"

step "conformance of the make build: make check runs ferry-conformance from pkg-config's bindir"
PKG_CONFIG_PATH=$pc_dir make -C "$work/c-plugin" BUILD_DIR="$work/make-build" check ||
  fail "conformance failed for $make_so"

echo
echo "PASS: the C example builds out of tree (CMake and pkg-config) and passes conformance"
