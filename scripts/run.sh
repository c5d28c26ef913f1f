#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the demo: worker
# processes loading a transport backend by name (tcp, then shm), calling each
# other, passing an RRef between three workers, one leaving and one joining.
# Then `ferry info`, a conformance run of the tcp plugin and of the
# third-party C example plugin, and a ping-pong beside a raw TCP floor.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}

"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh" "$build"
ferry="$build/bin/ferry"

step() { printf '\n==== %s\n' "$*"; }

step "ferry-demo --transport tcp: workers, calls, RRefs, leave and join"
"$build/bin/ferry-demo" --transport tcp

step "ferry-demo --transport shm: the same job over shared memory, chosen by name"
"$build/bin/ferry-demo" --transport shm | tail -n 12

step "ferry info: plugins found by name, what each offers, failed loads"
"$ferry" info

step "ferry info with FERRY_TRANSPORTS=^tcp (filters drop a plugin by name)"
FERRY_TRANSPORTS=^tcp "$ferry" info | sed -n '1,12p'

step "Asking for a plugin that does not exist (the error says what to do)"
"$ferry" info tpc 2>&1 | tail -n 2 || true

step "ferry conformance --plugin tcp --plugin uds (the C example plugin)"
"$ferry" conformance --plugin tcp --plugin uds --gtest_brief=1

step "ferry bench transport --plugin tcp (two processes, beside a raw TCP ping-pong)"
"$ferry" bench transport --plugin tcp --sizes 64,4096,1048576 --iters 2000 --mode busy
