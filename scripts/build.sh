#!/usr/bin/env bash
# Configures and builds ferry. Usage: scripts/build.sh [BUILD_DIR] [cmake args...]
# Default BUILD_DIR: build (RelWithDebInfo, warnings as errors).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
jobs=${FERRY_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -G Ninja "$@" >/dev/null
cmake --build "$build" -j "$jobs"
