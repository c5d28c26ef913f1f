#!/usr/bin/env bash
# Formats every C and C++ file in the tree with .clang-format, or with
# --check lists the files that are not formatted and exits 1.
# Usage: scripts/format.sh [--check]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
clang_format=$(command -v clang-format || command -v clang-format-14 || true)
if [ -z "$clang_format" ]; then
  echo "format: clang-format is not installed (apt-get install clang-format)" >&2
  exit 2
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.hpp' '*.cpp')
else  # an unpacked tarball: every source outside build directories
  mapfile -t files < <(find . -path './build*' -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.hpp' -o -name '*.cpp' \) -print)
fi
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    if ! "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if [ ${#bad[@]} -ne 0 ]; then
    printf 'format: not formatted (run scripts/format.sh): %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
"$clang_format" -i "${files[@]}"
echo "format: formatted ${#files[@]} files"
