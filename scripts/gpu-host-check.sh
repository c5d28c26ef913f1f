#!/usr/bin/env bash
# The fabric plugin on a lent GPU machine (the `device` tool), which has
# neither this repository's dependencies nor a network:
#   scripts/gpu-host-check.sh bundle [BUILD_DIR]   (here) copies what the
#       check needs from a RelWithDebInfo build (default build-bench) into
#       build-gpu/ (ignored by git; ~9 MB, stripped), with libtensorpipe and
#       libuv for ferry-bench-transport and Debian's fi_pingpong;
#   bash build-gpu/run.sh                          (there, carry build-gpu)
#       runs, writing into $OUT: ferry info with hmem auto and on,
#       conformance on shm (auto, hmem=on) and tcp;ofi_rxm,
#       fabric_hmem_cuda_test, fabric_plugin_test, ferry-bench-fabric-cpu
#       and the 64 B / 4 MiB / 64 MiB benchmark beside fi_pingpong;
#   bash build-gpu/run.sh bench                    (there) the benchmarks
#       only: three runs on shm and two on tcp;ofi_rxm, pinned to CPU 0 and
#       the nearest other core (same L3, another core: the hardest pair
#       for a latency ratio, since the fixed cost of the crossing is
#       smallest), one shm run on CPUs 0,1 for comparison, and
#       ferry-bench-fabric-cpu; 8 files at most (what the device tool
#       brings back).
# The machine's own libfabric is used (libfabric.so.1); the tests whose
# binaries name the build tree's plugin directory find it through a link.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ "${1:-}" = bundle ] || { echo "usage: $0 bundle [BUILD_DIR]" >&2; exit 2; }
build=${2:-$root/build-bench}
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
