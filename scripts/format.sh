#!/usr/bin/env bash
# Formats every C and C++ file in the tree with .clang-format, or with
# --check lists the files that are not formatted and exits 1.
# Usage: scripts/format.sh [--check]     (CLANG_FORMAT=path picks the binary)
# The tree is formatted by clang-format 14 (Debian 12's); another major
# version formats some constructs differently, so --check with one skips
# (exit 77) rather than failing on the version.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clang_format=${CLANG_FORMAT:-$(command -v clang-format || command -v clang-format-14 || true)}
if [ -z "$clang_format" ]; then
  echo "format: clang-format is not installed (apt-get install clang-format)" >&2
  exit 2
fi
major=$("$clang_format" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.hpp' '*.cpp')
else  # an unpacked tarball: every source outside build directories
  mapfile -t files < <(find . -path './build*' -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.hpp' -o -name '*.cpp' \) -print)
fi
if [ "${1:-}" = "--check" ]; then
  if [ "$major" != 14 ]; then
    echo "format: $clang_format is version ${major:-unknown}, the tree is formatted by 14: not checked"
    exit 77
  fi
  if ! "$clang_format" --dry-run --Werror "${files[@]}" 2>/tmp/ferry-format.$$; then
    grep -o '^[^:]*:[0-9]*:[0-9]*: error' /tmp/ferry-format.$$ | cut -d: -f1 | sort -u |
      sed 's/^/format: not formatted (run scripts\/format.sh): /' >&2
    rm -f /tmp/ferry-format.$$
    exit 1
  fi
  rm -f /tmp/ferry-format.$$
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
"$clang_format" -i "${files[@]}"
echo "format: formatted ${#files[@]} files"
