#!/usr/bin/env bash
# Runs torch's own RPC test suite (GENERIC_TESTS: 11 classes) against
# TENSORPIPE, FERRY on tcp and FERRY on shm, class by class, with a
# per-test time limit (a hang is a failure, not a 5-minute wait), and
# writes a per-class table of passed / failed / skipped plus every test
# FERRY fails that TENSORPIPE passes.
#
#   scripts/torch-rpc-suite.sh [--build DIR] [--backends "tensorpipe ferry-tcp ferry-shm"]
#                              [--classes "RpcTest DistAutogradTest ..."] [--runs N]
#                              [--reference-runs N] [--test-timeout S] [--out DIR]
#                              [-k PYTEST_EXPR]
#
# --runs 2 runs every class twice: a test passes only if it passed in both.
# --reference-runs 1 runs TENSORPIPE, the reference, only in the first run
# (default: as many runs as the others).
# Results: DIR/<backend>-<class>-<run>.xml (JUnit) and DIR/summary.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
backends="tensorpipe ferry-tcp ferry-shm"
classes="RpcTest DistAutogradTest JitRpcTest JitDistAutogradTest RemoteModuleTest \
DistOptimizerTest DdpUnderDistAutogradTest DdpComparisonTest ThreeWorkersRemoteModuleTest \
ParameterServerTest ReinforcementLearningRpcTest"
runs=1
reference_runs=""
test_timeout=60
out=""
kexpr=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --backends) backends=$2; shift 2 ;;
    --classes) classes=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --reference-runs) reference_runs=$2; shift 2 ;;
    --test-timeout) test_timeout=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -k) kexpr=$2; shift 2 ;;
    *) echo "torch-rpc-suite: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/torch-rpc-suite}
mkdir -p "$out"
if [ ! -e "$build/python/ferry/torch.py" ]; then
  echo "torch-rpc-suite: $build/python/ferry/torch.py missing: build $build first" >&2
  exit 2
fi

prefix() {  # the class-name prefix generate_tests gives each backend
  case "$1" in
    tensorpipe) echo TensorPipe ;; ferry-tcp) echo FerryTcp ;; ferry-shm) echo FerryShm ;;
    *) echo "torch-rpc-suite: unknown backend $1" >&2; exit 2 ;;
  esac
}

export PATH=/usr/bin:$PATH PYTHONPATH=$build/python FERRY_LOG_LEVEL=${FERRY_LOG_LEVEL:-error}
export DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=$test_timeout
for run in $(seq 1 "$runs"); do
  for backend in $backends; do
    if [ "$backend" = tensorpipe ] && [ "$run" -gt "${reference_runs:-$runs}" ]; then continue; fi
    p=$(prefix "$backend")
    for cls in $classes; do
      xml=$out/$backend-$cls-$run.xml
      echo "== run $run: $backend $cls" >&2
      # The per-test limit is torch's (MultiProcessTestCase kills a test's
      # processes after it); `timeout` only guards against the runner
      # itself wedging.
      FERRY_SUITE_BACKEND=$backend timeout --kill-after=30 $((test_timeout * 400)) \
        python3 -m pytest -q -p no:cacheprovider --junitxml="$xml" \
          ${kexpr:+-k "$kexpr"} "$root/bindings/torch/tests/test_torch_rpc_suite.py::$p$cls" \
          >"$out/$backend-$cls-$run.log" 2>&1 || true
      tail -1 "$out/$backend-$cls-$run.log" >&2
    done
  done
done
python3 "$root/bindings/torch/tests/suite_summary.py" --out "$out" --runs "$runs" \
  --backends "$backends" --classes "$classes" | tee "$out/summary.md"
