#!/usr/bin/env bash
# Builds the `ferry` Python package (the _ferry extension and ferry/*.py)
# for the python3 at hand, against a prebuilt libferry, without CMake: for
# a machine whose Python is not the one CMake builds for (CMake builds for
# Debian's /usr/bin/python3; a GPU machine may have another Python and
# pip's pybind11).
#
#   bindings/python/build_extension.sh OUT_DIR LIBFERRY_DIR [DLPACK_INCLUDE]
#
#   OUT_DIR         made if needed; OUT_DIR/ferry becomes the package, so
#                   PYTHONPATH=OUT_DIR imports it.
#   LIBFERRY_DIR    holds libferry.so or libferry.so.0 (CMake's <build>/lib).
#                   The extension's RPATH names it (after $ORIGIN/_lib, where
#                   a pip install puts libferry), and ferry's loader finds the
#                   plugins beside it in LIBFERRY_DIR/ferry/plugins (else set
#                   FERRY_PLUGIN_PATH).
#   DLPACK_INCLUDE  a directory holding dlpack/dlpack.h, where the compiler
#                   finds none itself; default: searched for in the Python's
#                   site-packages (torch's, CuPy's copies).
#
# Environment: PYTHON (default python3), CXX (default c++), FERRY_WERROR=1
# (warnings are errors, as in the CMake build), PYBIND11_INCLUDE (pybind11's
# headers where `python -m pybind11` is missing and they are not in
# /usr/include).
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
libdir=$(cd "$2" && pwd)
dlpack_include=${3:-}
PYTHON=${PYTHON:-python3}
CXX=${CXX:-c++}

say() { echo "build_extension: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# libferry: by its dev symlink if there is one, else by its soname.
if [ -e "$libdir/libferry.so" ]; then
  link_ferry=(-L"$libdir" -lferry)
elif [ -e "$libdir/libferry.so.0" ]; then
  link_ferry=("$libdir/libferry.so.0")
elif ls "$libdir"/libferry.so.0.* >/dev/null 2>&1; then
  die "only $(cd "$libdir" && ls libferry.so.0.* | head -n 1) in $libdir: the loader needs its soname, libferry.so.0 (ln -s $(cd "$libdir" && ls libferry.so.0.* | head -n 1) $libdir/libferry.so.0)"
else
  die "no libferry.so or libferry.so.0 in $libdir (build ferry first: cmake --build <build> --target ferry_c)"
fi

# Python's and pybind11's headers, as system headers (their warnings are
# not ours).
if includes=$("$PYTHON" -m pybind11 --includes 2>/dev/null); then
  read -r -a py_includes <<<"${includes//-I/-isystem }"
else
  pyinc=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  py_includes=(-isystem "$pyinc")
  if [ -n "${PYBIND11_INCLUDE:-}" ]; then
    py_includes+=(-isystem "$PYBIND11_INCLUDE")
  elif [ ! -e /usr/include/pybind11/pybind11.h ]; then
    die "pybind11 not found: pip install pybind11 (or set PYBIND11_INCLUDE)"
  fi
fi
[ -e "$(printf '%s' "${py_includes[1]}")/Python.h" ] ||
  die "Python.h not found in ${py_includes[1]}: install $PYTHON's development headers"
suffix=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')

# DLPack's header: given, or the compiler's own, or a copy some package ships.
work="$out/.build"
rm -rf "$work"
mkdir -p "$work"
dl_includes=()
if [ -n "$dlpack_include" ]; then
  [ -e "$dlpack_include/dlpack/dlpack.h" ] || die "no dlpack/dlpack.h in $dlpack_include"
  dl_includes=(-I"$dlpack_include")  # -I: a system directory given here is left in place
elif ! echo '#include <dlpack/dlpack.h>' | "$CXX" -fsyntax-only -x c++ - 2>/dev/null; then
  site=$("$PYTHON" -c 'import site, sysconfig; print("\n".join(site.getsitepackages() + [sysconfig.get_paths()["purelib"]]))')
  found=""
  while read -r d; do
    [ -d "$d" ] || continue
    found=$(find "$d" -maxdepth 6 -name dlpack.h \( -path '*/dlpack/dlpack.h' -o -path '*/ATen/dlpack.h' \) 2>/dev/null | head -n 1)
    [ -n "$found" ] && break
  done <<<"$site"
  [ -n "$found" ] || die "no dlpack/dlpack.h: pass DLPACK_INCLUDE (a directory holding dlpack/dlpack.h)"
  mkdir -p "$work/include/dlpack"
  cp "$found" "$work/include/dlpack/dlpack.h"
  dl_includes=(-isystem "$work/include")
  say "DLPack header: $found"
fi

# PYBIND11_INTERNALS_KIND (pybind11 2.x) and PYBIND11_COMPILER_TYPE (2.x and
# 3.x): pybind11 internals of our own, not shared with other extensions
# (CMakeLists.txt says why: torch 2.11 crashed otherwise).
flags=(-O2 -g -std=c++17 -fPIC -fvisibility=hidden -DNDEBUG -pthread
  '-DPYBIND11_INTERNALS_KIND="_ferry"' '-DPYBIND11_COMPILER_TYPE="_ferry_gcc"'
  -Wall -Wextra -Wshadow -Wno-unused-parameter)
[ "${FERRY_WERROR:-0}" = 1 ] && flags+=(-Werror)
sources=(module.cc tensors.cc dispatcher.cc thread_gil.cc)

say "compiling ${sources[*]} for $("$PYTHON" -c 'import sys; print(sys.version.split()[0])') with $CXX"
pids=()
for s in "${sources[@]}"; do
  "$CXX" "${flags[@]}" "${py_includes[@]}" -I"$repo/abi/include" "${dl_includes[@]}" \
    -c "$here/src/$s" -o "$work/${s%.cc}.o" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
[ $failed = 0 ] || die "compilation failed"

mkdir -p "$out/ferry"
rm -f "$out"/ferry/_ferry*.so
ext="$out/ferry/_ferry$suffix"
"$CXX" -shared -pthread "$work"/*.o -o "$ext" "${link_ferry[@]}" \
  -Wl,-rpath,"\$ORIGIN/_lib:$libdir"

# The pure-Python part (as CMake copies it; _errors.py is a source file too).
cp "$here"/ferry/*.py "$out/ferry/"
rm -rf "$work"

# The package imports, and its extension finds libferry.
(cd / && PYTHONPATH="$out" "$PYTHON" -c 'import ferry, ferry._ferry as f; print("build_extension: ferry imports from", ferry.__path__[0], "(API %d.%d)" % f.api_version())') ||
  die "the built package does not import (see above)"
echo "$out"
