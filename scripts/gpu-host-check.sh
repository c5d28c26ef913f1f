#!/usr/bin/env bash
# Proves the CUDA IPC work on a lent GPU machine (the `device` tool), which
# has no Debian packages, no network and none of this repository's build
# dependencies, but has nvcc, CMake, g++, Python 3.12 with torch, CuPy,
# pybind11 and pytest:
#
#   scripts/gpu-host-check.sh bundle [BUILD_DIR]   (here) copies what the
#       check needs from a RelWithDebInfo build (default build-bench-cuda)
#       into build-gpu/ (ignored by git; stripped, well under 40 MB):
#       ferry, ferry-info, ferry-conformance, ferry-cuda-probe,
#       ferry-bench-cuda, the GPU test binaries (cuda_ipc_test and its peer,
#       device_rpc_test, any other *cuda*test* / *device*test*), libferry and every
#       plugin (libferry-cuda_ipc.so among them), the Python package's
#       sources with what bindings/python/build_extension.sh needs (the
#       public headers, Debian's dlpack.h), the Python tests, the example
#       examples/python/cuda_tensors.py and bench/cuda_ipc's scripts. A
#       piece the build lacks is a warning, not a failure (the rest still
#       runs there), and build-gpu/MISSING lists it.
#   bash build-gpu/run.sh                          (there, carry build-gpu)
#       writes into $OUT, every step under its own timeout, the whole run
#       within 9 minutes, each step's log kept when it fails:
#         machine.txt   nvidia-smi, driver, toolchain, Python/torch/CuPy;
#         logs.txt      every step's output, one after the other;
#         summary.txt   each step's exit status and time, the key numbers;
#         bench-cuda.json, bench-torch.json, bench-torch-cupy.json,
#         bench-cuda.png (7 files; the device tool brings back 8 at most).
#       Steps: (1) ferry-cuda-probe (30 s); (2) ferry info; (3) the GPU test
#       binaries and ferry-conformance --plugin cuda_ipc (its DEV-*
#       requirements); (4) the Python extension built there for its Python
#       (build_extension.sh), then pytest test_cuda_tensors.py and the
#       example with torch and with CuPy; (5) ferry-bench-cuda and
#       bench_torch.py (torch, then CuPy if time is left), and the plot.
#   bash build-gpu/run.sh bench                    (there) step 5 only.
#
#   scripts/gpu-host-check.sh bundle-fabric [BUILD_DIR]
#       the earlier check of the fabric plugin (default build-bench): its own
#       build-gpu/ and run.sh (`bash build-gpu/run.sh [bench]`), unchanged.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  echo "usage: $0 bundle [BUILD_DIR]          (CUDA IPC; default build-bench-cuda)" >&2
  echo "       $0 bundle-fabric [BUILD_DIR]   (the fabric plugin; default build-bench)" >&2
  exit 2
}

# ---- the fabric plugin's check (as it was) ----------------------------------
bundle_fabric() {
build=${1:-$root/build-bench}
g=$root/build-gpu
rm -rf "$g"
mkdir -p "$g/bin" "$g/lib/ferry/plugins" "$g/lib/extra"
for b in ferry ferry-info ferry-conformance fabric_plugin_test fabric_hmem_cuda_test \
         ferry-bench-transport ferry-bench-fabric-cpu; do
  cp "$build/bin/$b" "$g/bin/"
done
cp "$build"/lib/ferry/plugins/*.so "$g/lib/ferry/plugins/"
cp -P "$build"/lib/libferry.so* "$g/lib/"
cp /usr/bin/fi_pingpong "$g/bin/"
for l in libtensorpipe.so.0 libuv.so.1; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')
  [ -n "$p" ] && cp -L "$p" "$g/lib/extra/"
done
strip --strip-debug "$g"/bin/ferry* "$g"/bin/fabric_* "$g"/lib/ferry/plugins/*.so \
  "$g"/lib/libferry.so.*.*.* "$g"/lib/extra/* 2>/dev/null || true
cat > "$g/run.sh" <<'RUN'
#!/bin/bash
set -u
G=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$G/lib/extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$G/bin:$PATH
export FERRY_PLUGIN_PATH=$G/lib/ferry/plugins FI_TCP_IFACE=lo
O=${OUT:-/tmp/out}; mkdir -p "$O"
[ -e /work/main/build-bench/lib/ferry/plugins ] || { mkdir -p /work/main/build-bench/lib/ferry && ln -s "$G/lib/ferry/plugins" /work/main/build-bench/lib/ferry/plugins; }
if [ "${1:-}" = bench ]; then
  # CPU 0 and the first CPU on another core that shares CPU 0's L3.
  # (lscpu -p=CPU,CORE,CACHE: CPU,Core,,L1d,L1i,L2,L3: the L3 id is last.)
  near=$(lscpu -p=CPU,CORE,CACHE | awk -F, '!/^#/ { if ($1 == 0) { core = $2; l3 = $NF; next }
         if ($2 != core && $NF == l3) { print $1; exit } }')
  near=${near:-1}
  { uname -a; nproc; lscpu | grep -E "Model name|Thread|Socket|NUMA node0|L3"; echo "pair: 0,$near"
    lscpu -p=CPU,CORE,SOCKET,CACHE | head -6; } > "$O/machine.txt" 2>&1
  L=$O/log.txt
  for i in 1 2 3; do timeout 60 ferry-bench-fabric-cpu --provider shm >> "$L" 2>&1; done
  for i in 1 2 3; do FERRY_FABRIC_PROVIDER=shm timeout 120 ferry-bench-transport --plugin fabric --sizes 64,4M,64M --mode busy --cpus 0,$near --json "$O/fabric-shm-$i.json" >> "$L" 2>&1; echo "bench shm $i rc=$?" >> "$L"; done
  for i in 1 2; do FERRY_FABRIC_PROVIDER="tcp;ofi_rxm" timeout 150 ferry-bench-transport --plugin fabric --sizes 64,4M,64M --mode busy --cpus 0,$near --json "$O/fabric-tcp-$i.json" >> "$L" 2>&1; echo "bench tcp $i rc=$?" >> "$L"; done
  FERRY_FABRIC_PROVIDER=shm timeout 60 ferry-bench-transport --plugin fabric --sizes 64 --mode busy --no-stream --cpus 0,1 >> "$L" 2>&1
  cat "$O/machine.txt"; grep -h "ferry adds\|fi_pingpong (.*) 64 round trip\|rc=\|pinning" "$L"
  exit 0
fi
{ uname -a; nproc; lscpu | grep -E "Model name|Thread|Socket|NUMA node0"; ls -l /dev/nvidiactl; nvidia-smi -L
  f=$(ldd "$G/lib/ferry/plugins/libferry-fabric.so" | awk '/libfabric/ {print $3}')
  echo "libfabric: $f; CUDA strings in it: $(strings "$f" | grep -c -i 'libcuda')"
  nvidia-smi --query-gpu=driver_version --format=csv,noheader; } > "$O/machine.txt" 2>&1
for prov in shm "tcp;ofi_rxm"; do
  tag=${prov%%;*}
  FERRY_FABRIC_PROVIDER="$prov" timeout 60 ferry info > "$O/info-$tag.txt" 2>&1; echo "info $tag rc=$?" >> "$O/summary.txt"
  FERRY_FABRIC_PROVIDER="$prov" FERRY_FABRIC_HMEM=on timeout 60 ferry info > "$O/info-hmem-on-$tag.txt" 2>&1; echo "info hmem=on $tag rc=$?" >> "$O/summary.txt"
  FERRY_FABRIC_PROVIDER="$prov" timeout 120 ferry-conformance --plugin fabric > "$O/conformance-$tag.txt" 2>&1; echo "conformance $tag rc=$?" >> "$O/summary.txt"
done
FERRY_FABRIC_PROVIDER=shm FERRY_FABRIC_HMEM=on timeout 120 ferry-conformance --plugin fabric > "$O/conformance-shm-hmem-on.txt" 2>&1; echo "conformance shm hmem=on rc=$?" >> "$O/summary.txt"
FERRY_FABRIC_HMEM=on timeout 60 ferry-bench-fabric-cpu --provider shm > "$O/fabric-cpu-shm-hmem-on.txt" 2>&1
timeout 240 fabric_hmem_cuda_test > "$O/fabric_hmem_cuda_test.txt" 2>&1; echo "fabric_hmem_cuda_test rc=$?" >> "$O/summary.txt"
timeout 240 fabric_plugin_test > "$O/fabric_plugin_test.txt" 2>&1; echo "fabric_plugin_test rc=$?" >> "$O/summary.txt"
for i in 1 2 3; do timeout 60 ferry-bench-fabric-cpu --provider shm >> "$O/fabric-cpu-shm.txt" 2>&1; done
for i in 1 2 3; do FERRY_FABRIC_PROVIDER=shm timeout 120 ferry-bench-transport --plugin fabric --sizes 64,4M,64M --mode busy --json "$O/fabric-shm-$i.json" > "$O/fabric-shm-$i.txt" 2>&1; echo "bench shm $i rc=$?" >> "$O/summary.txt"; done
FERRY_FABRIC_PROVIDER="tcp;ofi_rxm" timeout 180 ferry-bench-transport --plugin fabric --sizes 64,4M,64M --mode busy --json "$O/fabric-tcp-1.json" > "$O/fabric-tcp-1.txt" 2>&1; echo "bench tcp rc=$?" >> "$O/summary.txt"
cat "$O/summary.txt" "$O/machine.txt"
grep -h "Skipped\|SKIPPED\|FAILED" "$O/fabric_hmem_cuda_test.txt" | cut -c1-300 | head -6
grep -h "fi_pingpong (.*) 64 round trip\|ferry adds" "$O"/fabric-*.txt
grep -h "passed, " "$O"/conformance-*.txt
RUN
chmod +x "$g/run.sh"
du -sh "$g"
echo "now: run 'bash build-gpu/run.sh' on the device with carry [\"build-gpu\"]"
}

# ---- CUDA IPC -----------------------------------------------------------------
warn() {
  echo "gpu-host-check: warning: $*" >&2
  echo "$*" >> "$g/MISSING"
}

bundle_cuda() {
build=$(cd "${1:-$root/build-bench-cuda}" && pwd)
g=$root/build-gpu
rm -rf "$g"
mkdir -p "$g/bin" "$g/lib/ferry/plugins" "$g/include/dlpack" "$g/python" "$g/src"
: > "$g/MISSING"

# Programs: the named ones, then every GPU test the build has (cuda or
# device in the name), whatever their final names.
for b in ferry ferry-info ferry-conformance ferry-cuda-probe ferry-bench-cuda; do
  if [ -x "$build/bin/$b" ]; then cp "$build/bin/$b" "$g/bin/"; else warn "bin/$b not built"; fi
done
for b in cuda_ipc_test cuda_ipc_test_peer device_rpc_test; do
  [ -x "$build/bin/$b" ] || warn "bin/$b not built (a GPU test binary the run expects)"
done
for f in "$build"/bin/*cuda*test* "$build"/bin/*device*test*; do
  case $(basename "$f") in fake_*) continue ;; esac  # host-only fakes: CI runs them
  [ -x "$f" ] && [ ! -e "$g/bin/$(basename "$f")" ] && cp "$f" "$g/bin/"
done
if compgen -G "$build/lib/libferry.so*" > /dev/null; then
  cp -P "$build"/lib/libferry.so* "$g/lib/"
else
  warn "lib/libferry.so not built"
fi
cp "$build"/lib/ferry/plugins/*.so "$g/lib/ferry/plugins/" 2>/dev/null || warn "no plugins built"
[ -e "$g/lib/ferry/plugins/libferry-cuda_ipc.so" ] || warn "lib/ferry/plugins/libferry-cuda_ipc.so not built"
# The fabric plugin needs libfabric, which that machine may lack; ferry info
# would only list it as failed.
rm -f "$g/lib/ferry/plugins/libferry-fabric.so"
strip --strip-debug "$g"/bin/* "$g"/lib/ferry/plugins/*.so "$g"/lib/libferry.so.*.*.* 2>/dev/null || true

# The Python package's sources and what build_extension.sh compiles them
# with (the machine has pybind11 and Python's headers, not dlpack.h).
cp /usr/include/dlpack/dlpack.h "$g/include/dlpack/" 2>/dev/null || warn "/usr/include/dlpack/dlpack.h missing (Debian: libdlpack-dev)"
mkdir -p "$g/src/bindings/python" "$g/src/abi" "$g/src/examples/python" "$g/src/bench/cuda_ipc" \
  "$g/src/bench/python"
cp -r "$root/bindings/python/ferry" "$root/bindings/python/src" "$root/bindings/python/tests" \
  "$g/src/bindings/python/"
find "$g/src" -name __pycache__ -prune -exec rm -rf {} +
for f in build_extension.sh setup.py; do
  [ -e "$root/bindings/python/$f" ] && cp "$root/bindings/python/$f" "$g/src/bindings/python/"
done
[ -e "$g/src/bindings/python/build_extension.sh" ] || warn "bindings/python/build_extension.sh not written yet (run.sh then compiles the extension itself)"
[ -e "$g/src/bindings/python/tests/test_cuda_tensors.py" ] || warn "bindings/python/tests/test_cuda_tensors.py not written yet"
cp -r "$root/abi/include" "$g/src/abi/"
cp "$root"/examples/python/*.py "$g/src/examples/python/"
[ -e "$g/src/examples/python/cuda_tensors.py" ] || warn "examples/python/cuda_tensors.py not written yet"
cp "$root/bench/cuda_ipc/bench_torch.py" "$root/bench/cuda_ipc/plot_cuda_ipc.py" "$g/src/bench/cuda_ipc/"
cp "$root/bench/python/bench_pair.py" "$g/src/bench/python/"  # bench_torch.py's driver
# The package to import there: its pure-Python part now, the extension
# once built there.
cp -r "$g/src/bindings/python/ferry" "$g/python/"

{ echo "# written by scripts/gpu-host-check.sh bundle $build"
  echo "BUILD_DIR='$build'"
  echo "COMMIT='$(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes')'"
  echo "BUNDLED='$(date -u +%FT%TZ)'"; } > "$g/bundle.env"
cat > "$g/run.sh" <<'RUN'
#!/bin/bash
# The CUDA IPC check on the GPU machine: see scripts/gpu-host-check.sh.
#   bash build-gpu/run.sh [bench]     (writes into $OUT, or /tmp/out)
set -u
G=$(cd "$(dirname "$0")" && pwd)
. "$G/bundle.env"
S=$G/src
O=${OUT:-/tmp/out}; mkdir -p "$O"
L=$O/logs.txt SUM=$O/summary.txt
: > "$L"; : > "$SUM"
START=$(date +%s) DEADLINE=$(( $(date +%s) + 530 ))   # the whole run: under 9 minutes
export PATH=$G/bin:$PATH LD_LIBRARY_PATH=$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FERRY_PLUGIN_PATH=$G/lib/ferry/plugins PYTHONPATH=$G/python PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1 FERRY_SECRET=gpu-host-check
# Test binaries that name the build tree's paths (plugins, peers) find them.
[ -e "$BUILD_DIR" ] || { mkdir -p "$(dirname "$BUILD_DIR")" && ln -s "$G" "$BUILD_DIR"; } 2>/dev/null
PY=${FERRY_PYTHON:-python3}   # the machine's python3 holds torch and CuPy

# step NAME MAX_SECONDS CMD...: runs CMD under a timeout that also keeps
# the run inside its deadline; output to logs.txt, status to summary.txt.
step() {
  local name=$1 want=$2; shift 2
  local left=$(( DEADLINE - $(date +%s) - 10 ))
  local t=$(( want < left ? want : left ))
  if [ "$t" -lt 5 ]; then
    printf '%-44s skipped: out of time\n' "$name" >> "$SUM"; return 124
  fi
  local s
  s=$(date +%s)
  printf '\n==== %s (timeout %ss): %s\n' "$name" "$t" "$*" >> "$L"
  if declare -F "$1" > /dev/null; then  # a function of this script
    timeout -k 5 "$t" bash -c '"$@"' step "$@" >> "$L" 2>&1
  else
    timeout -k 5 "$t" "$@" >> "$L" 2>&1
  fi
  local rc=$?
  local took=$(( $(date +%s) - s ))
  printf '==== %s: rc=%s in %ss\n' "$name" "$rc" "$took" >> "$L"
  printf '%-44s rc=%-4s %4ss%s\n' "$name" "$rc" "$took" "$([ $rc = 124 ] && echo '  (timed out)')" >> "$SUM"
  return $rc
}

machine() {
  { echo "bundle: $COMMIT, $BUNDLED"; date -u; uname -a; nproc
    lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node0"; echo "benchmarks: not pinned"
    nvidia-smi; nvidia-smi -q | grep -iE "driver version|cuda version|product name|bus id|persistence|compute mode|mig mode" | head -20
    nvidia-smi topo -m 2>&1 | head -5
    ls -l /dev/nvidia* 2>&1 | head; ls /dev/shm | head -3; df -h /dev/shm | tail -1
    echo "nvcc: $(nvcc --version 2>&1 | tail -2 | tr '\n' ' ')"
    echo "cmake: $(cmake --version 2>&1 | head -1)"; echo "g++: $(g++ --version 2>&1 | head -1)"
    echo "python: $(command -v $PY) $($PY --version 2>&1)"
    timeout 60 $PY - <<'PYV'
import importlib
for m in ("torch", "cupy", "pybind11", "pytest", "numpy", "matplotlib"):
    try:
        mod = importlib.import_module(m)
        extra = ""
        if m == "torch":
            extra = " cuda %s, available %s, %s" % (mod.version.cuda, mod.cuda.is_available(),
                    mod.cuda.get_device_name(0) if mod.cuda.is_available() else "-")
            import torch.distributed.rpc as rpc
            extra += "; rpc available %s, set_device_map %s" % (rpc.is_available(),
                    hasattr(rpc, "TensorPipeRpcBackendOptions") and
                    hasattr(rpc.TensorPipeRpcBackendOptions, "set_device_map"))
        if m == "cupy":
            extra = " runtime %s, devices %s" % (mod.cuda.runtime.runtimeGetVersion(),
                                                 mod.cuda.runtime.getDeviceCount())
        print("%s %s%s" % (m, getattr(mod, "__version__", "?"), extra))
    except Exception as e:
        print("%s: %s: %s" % (m, type(e).__name__, e))
PYV
    echo "bundle MISSING:"; cat "$G/MISSING"
  } > "$O/machine.txt" 2>&1
}

# The extension for this machine's Python: bindings/python/build_extension.sh
# where it was bundled, else the same compile done here.
build_extension() {
  local b=$S/bindings/python/build_extension.sh
  if [ -e "$b" ]; then
    PYTHON=$PY bash "$b" "$G/python" "$G/lib" "$G/include" || return
  else
    echo "build_extension.sh not bundled: compiling the extension directly"
    local inc suf objs=()
    inc=$($PY -m pybind11 --includes) || return
    suf=$($PY -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))") || return
    mkdir -p "$G/obj"
    for f in "$S"/bindings/python/src/*.cc; do
      g++ -std=c++17 -O2 -fPIC -fvisibility=hidden $inc -I"$S/abi/include" -I"$G/include" \
        -c "$f" -o "$G/obj/$(basename "$f").o" & objs+=("$G/obj/$(basename "$f").o")
    done
    wait
    g++ -shared -o "$G/python/ferry/_ferry$suf" "${objs[@]}" -L"$G/lib" -lferry \
      -Wl,-rpath,'$ORIGIN/../../lib' || return
  fi
  ls "$G"/python/ferry/_ferry*.so && $PY -c "import ferry; print('import ferry: ok', ferry.__file__)"
}

example() {  # the example with one framework: torch, or cupy (torch hidden)
  local ex=$S/examples/python/cuda_tensors.py
  [ -e "$ex" ] || { echo "examples/python/cuda_tensors.py not bundled"; return 3; }
  if [ "$1" = torch ]; then
    $PY "$ex"
  else
    # The example uses torch when it has CUDA, else CuPy: a torch that
    # cannot be imported makes it take CuPy.
    mkdir -p "$G/no-torch"
    echo 'raise ImportError("hidden by gpu-host-check.sh: the CuPy path")' > "$G/no-torch/torch.py"
    PYTHONPATH=$G/no-torch:$PYTHONPATH $PY "$ex"
  fi
}

gpu_tests() {  # each GPU test binary under its own step
  local f
  for f in "$G"/bin/*test*; do
    case $(basename "$f") in *peer*) continue ;; esac  # a test's peer process
    [ -x "$f" ] && step "test $(basename "$f")" 90 "$f"
  done
}

benchmarks() {
  step "ferry-bench-cuda" 150 ferry-bench-cuda --json "$O/bench-cuda.json"
  step "bench_torch.py (torch)" 200 $PY "$S/bench/cuda_ipc/bench_torch.py" \
    --sizes 4K,64K,1M,16M,64M,256M --timeout 90 --json "$O/bench-torch.json"
  if [ $(( DEADLINE - $(date +%s) )) -gt 120 ]; then
    step "bench_torch.py (cupy)" 110 $PY "$S/bench/cuda_ipc/bench_torch.py" \
      --framework cupy --iters 500 --timeout 50 --json "$O/bench-torch-cupy.json"
  else
    printf '%-44s skipped: out of time\n' "bench_torch.py (cupy)" >> "$SUM"
  fi
  local args=()
  [ -s "$O/bench-cuda.json" ] && args+=(--cuda "$O/bench-cuda.json")
  [ -s "$O/bench-torch.json" ] && args+=(--torch "$O/bench-torch.json")
  [ ${#args[@]} -gt 0 ] && step "plot" 45 $PY "$S/bench/cuda_ipc/plot_cuda_ipc.py" "${args[@]}" "$O/bench-cuda.png"
}

export G S O PY
export -f build_extension example
machine
if [ "${1:-}" != bench ]; then
  step "ferry-cuda-probe" 30 ferry-cuda-probe
  step "ferry info" 30 ferry info
  gpu_tests
  step "ferry-conformance --plugin cuda_ipc" 150 ferry-conformance --plugin cuda_ipc
  if step "build the Python extension" 150 build_extension; then
    if [ -e "$S/bindings/python/tests/test_cuda_tensors.py" ]; then
      step "pytest test_cuda_tensors.py" 120 $PY -m pytest -q -rs -p no:cacheprovider \
        "$S/bindings/python/tests/test_cuda_tensors.py"
    else
      printf '%-44s not bundled\n' "pytest test_cuda_tensors.py" >> "$SUM"
    fi
    step "example cuda_tensors.py (torch)" 60 example torch
    step "example cuda_tensors.py (cupy)" 60 example cupy
  fi
fi
[ "${1:-}" = bench ] && step "build the Python extension" 150 build_extension
if $PY -c "import ferry" > /dev/null 2>&1; then
  benchmarks
else
  step "ferry-bench-cuda" 150 ferry-bench-cuda --json "$O/bench-cuda.json"
  printf '%-44s skipped: no Python extension\n' "bench_torch.py" >> "$SUM"
fi

# The key numbers, step by step.
section() {  # the output of the step named $1
  awk -v n="==== $1 (" -v e="==== $1: rc=" 'index($0, n) == 1 { on = 1; next }
    index($0, e) == 1 { on = 0 } on' "$L"
}
{ echo; echo "---- key lines (whole run $(( $(date +%s) - START ))s)"
  section "ferry-cuda-probe" | tail -n 15
  for f in "$G"/bin/*test*; do
    section "test $(basename "$f")" | grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test|^\[  FAILED  \] [A-Za-z]" | sed "s|^|$(basename "$f"): |" | head -12
  done
  section "ferry-conformance --plugin cuda_ipc" | grep -E "[0-9]+ passed, [0-9]+ failed|^ *FAIL " | head -12
  section "pytest test_cuda_tensors.py" | tail -n 4
  for fw in torch cupy; do section "example cuda_tensors.py ($fw)" | tail -n 2; done
  section "ferry-bench-cuda" | grep -E "^ferry-bench-cuda|^  [0-9]+ (KiB|MiB|GiB)|^  (PASS|MISS) |goals met|STAGED|device messages|median"
  for fw in torch cupy; do
    section "bench_torch.py ($fw)" | grep -E "^(bench_torch|metric|device echo|ferry 4 KiB|ferry no-op|torch side|note:|ferry: |torch: )"
  done
} >> "$SUM"
cat "$SUM"
echo "(machine: $O/machine.txt; every step's output: $O/logs.txt)"
RUN
chmod +x "$g/run.sh"
du -sh "$g"
[ -s "$g/MISSING" ] && { echo "bundled without:"; sed 's/^/  /' "$g/MISSING"; }
echo "now: on the device, 'bash build-gpu/run.sh' with carry [\"build-gpu\"]"
}

case "${1:-}" in
  bundle) bundle_cuda "${2:-}" ;;
  bundle-fabric) bundle_fabric "${2:-}" ;;
  *) usage ;;
esac
