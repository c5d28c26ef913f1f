#!/usr/bin/env bash
# Proves the *installed* ferry SDK works on its own, as a new user meets it:
#   1. installs the build at BUILD_DIR into a fresh staging prefix;
#   2. ferry.h compiles with the SDK's own flags, DLPack's header included
#      from the SDK (include/ferry/deps), not from the system;
#   3. examples/cpp-app (installed under share/ferry/examples) builds with
#      CMake (find_package(ferry), ferry::ferry) and with pkg-config, and
#      both run: two workers, a call with a tensor, "cpp-app: ok";
#   4. installed programs run from the prefix without LD_LIBRARY_PATH
#      (ferry-demo over tcp, ferry info);
#   5. the installed plugin skeleton builds optimised with no build type,
#      `ferry info` loads it, and it installs into <prefix>/lib/ferry/plugins.
# Usage: scripts/test-sdk-out-of-tree.sh BUILD_DIR    (KEEP_WORK=1 keeps it)
set -euo pipefail

if [[ $# -ne 1 || ! -f "$1/CMakeCache.txt" ]]; then
  echo "usage: $0 BUILD_DIR   (a configured and built ferry build tree)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-sdk.XXXXXX")
if [[ "${KEEP_WORK:-0}" == 1 ]]; then echo "work tree: $work"; else trap 'rm -rf "$work"' EXIT; fi
stage=$work/stage
jobs=${JOBS:-2}
unset LD_LIBRARY_PATH FERRY_PLUGIN_PATH
export FERRY_SECRET=${FERRY_SECRET:-sdk-out-of-tree-test}  # a job secret, as on a cluster

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "install $build into $stage"
cmake --install "$build" --prefix "$stage" >"$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install failed"; }
pc_dir=$(dirname "$(find "$stage" -name ferry.pc -path '*/pkgconfig/*' | head -n 1)")
export PKG_CONFIG_PATH=$pc_dir
examples=$stage/share/ferry/examples
[[ -d $examples/cpp-app && -d $examples/plugin-skeleton && -d $examples/c-plugin ]] ||
  fail "the SDK did not install share/ferry/examples/{cpp-app,plugin-skeleton,c-plugin}"

step "ferry.h takes DLPack's header from the SDK"
echo '#include <ferry/ferry.h>' > "$work/h.c"
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -std=c99 -E $(pkg-config --cflags ferry) "$work/h.c" > "$work/h.i" ||
  fail "ferry.h does not compile with \`pkg-config --cflags ferry\`"
used=$(sed -n 's|^# [0-9]* "\(.*/dlpack/dlpack\.h\)".*|\1|p' "$work/h.i" | head -n 1)
[[ -n $used && $(realpath "$used") == "$(realpath "$stage")/include/ferry/deps/dlpack/dlpack.h" ]] ||
  fail "dlpack/dlpack.h came from '${used:-nowhere}', not the SDK ($stage/include/ferry/deps)"
echo "dlpack/dlpack.h: $(realpath "$used")"
[[ -n "$(pkg-config --libs ferry)" ]] || fail "ferry.pc has no Libs"

step "a C++ application with CMake: find_package(ferry), ferry::ferry"
cp -r "$examples/cpp-app" "$work/app-cmake"
cmake -S "$work/app-cmake" -B "$work/app-cmake/build" -DCMAKE_PREFIX_PATH="$stage" >/dev/null
cmake --build "$work/app-cmake/build" -j "$jobs"
"$work/app-cmake/build/cpp-app" | tee "$work/app-cmake.out"
grep -q "cpp-app: ok" "$work/app-cmake.out" || fail "the CMake-built application failed"

step "the same application with make and pkg-config"
cp -r "$examples/cpp-app" "$work/app-make"
make -C "$work/app-make" >/dev/null
"$work/app-make/cpp-app" | tee "$work/app-make.out"
grep -q "cpp-app: ok" "$work/app-make.out" || fail "the pkg-config-built application failed"

step "installed programs run from the prefix, without LD_LIBRARY_PATH"
for exe in ferry-demo ferry-info ferry; do
  [[ -x $stage/bin/$exe ]] || fail "bin/$exe not installed"
  readelf -d "$stage/bin/$exe" | grep -Eq 'R(UN)?PATH.*\$ORIGIN/\.\./' ||
    fail "bin/$exe has no RPATH to the prefix's lib"
done
"$stage/bin/ferry" info tcp > "$work/info.out" || { cat "$work/info.out"; fail "ferry info tcp"; }
timeout 120 "$stage/bin/ferry-demo" --transport tcp > "$work/demo.out" 2>&1 ||
  { cat "$work/demo.out"; fail "the installed ferry-demo failed"; }
grep -q "ferry demo: done" "$work/demo.out" || fail "the installed ferry-demo did not finish"
echo "ferry-demo: done"

step "the plugin skeleton: builds optimised by default, loads, installs to lib/ferry/plugins"
cp -r "$examples/plugin-skeleton" "$work/skeleton"
cmake -S "$work/skeleton" -B "$work/skeleton/build" -DCMAKE_PREFIX_PATH="$stage" >/dev/null
cmake --build "$work/skeleton/build" -j "$jobs" -- VERBOSE=1 > "$work/skeleton.log"
grep -q -- "-O2" "$work/skeleton.log" || { cat "$work/skeleton.log"; fail "not optimised by default"; }
so=$work/skeleton/build/libferry-skeleton.so
"$stage/bin/ferry" info "$so" > "$work/skeleton-info.out" ||
  { cat "$work/skeleton-info.out"; fail "ferry info does not load the skeleton"; }
grep -q "skeleton" "$work/skeleton-info.out" || fail "ferry info does not list the skeleton"
cmake --install "$work/skeleton/build" --prefix "$work/plugins-prefix" >/dev/null
lib=$(basename "$(dirname "$(find "$stage" -name 'libferry.so*' | head -n 1)")")
[[ -f $work/plugins-prefix/$lib/ferry/plugins/libferry-skeleton.so ]] ||
  fail "the skeleton did not install into <prefix>/$lib/ferry/plugins"

echo
echo "PASS: the installed SDK builds and runs a C++ application (CMake, pkg-config), its programs run from the prefix, and a plugin starts from the skeleton"
