#!/usr/bin/env python3
"""ferry's Python API beside torch.distributed.rpc (TensorPipe, CUDA tensors
with a device map) on one GPU: two processes, one run, the same functions.

    PYTHONPATH=build/python python3 bench/cuda_ipc/bench_torch.py \
        --json docs/benchmarks/cuda-ipc-python.json

Measures, for each system: rpc_sync echo of a device tensor (4 KiB .. 64 MiB;
--sizes adds 256M), the caller's current stream synchronised before each
round trip's clock stops (the echo is usable when timed), and ferry's no-op
rpc_sync in the same run. Prints speedup = torch / ferry per size and the
goals: >= 3x up to 1 MiB, >= 1x above; a 4 KiB device rpc_sync within 2x
ferry's no-op. --framework cupy sends CuPy arrays through ferry (torch's
side stays torch: torch.distributed.rpc moves torch tensors only). --framework host
(numpy, torch CPU tensors) is a dry run of this harness without a GPU: its
figures are not device figures.

Where torch has no TensorPipe device maps (set_device_map), or its run with
one fails, its side is torch.distributed.rpc with the tensor staged through
host memory (.cpu() there, .cuda() back; --torch-path staged asks for it),
and the JSON says so; where it has no
torch.distributed.rpc at all, only ferry is measured.

Exit status: 0 measured, 1 a side failed, 77 no GPU (or no torch / CuPy).
Structure and helpers follow bench/python/rpc_vs_torch.py.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

# The two-process driver is bench/python's, shared with rpc_vs_torch.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from bench_pair import PairFailed, free_port, run_pair  # noqa: E402

DEFAULT_SIZES = "4K,64K,1M,16M,64M"
EXIT_NO_GPU = 77


# ---- functions the callee runs (by reference: this module on both sides) ----

def noop():
    return None


def echo(x):
    return x


_stop = None


def _stop_callee():
    _stop.set()


KDL_CUDA = 2  # DLPack's kDLCUDA


def on_gpu(y):
    """True when y (any DLPack producer) is in CUDA device memory."""
    try:
        return int(y.__dlpack_device__()[0]) == KDL_CUDA
    except (AttributeError, TypeError, ValueError):
        return False


# ---- frameworks --------------------------------------------------------------

class TorchFramework:
    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch

    def tensor(self, size, fill):
        return self.torch.full((size,), fill, dtype=self.torch.uint8, device="cuda:0")

    def sync(self):
        self.torch.cuda.current_stream().synchronize()

    def describe(self, y):
        return "torch %s" % y.device if hasattr(y, "device") else type(y).__name__

    def equal(self, x, y):
        y = y if isinstance(y, self.torch.Tensor) else self.torch.from_dlpack(y)
        return bool(self.torch.equal(x, y.to(x.device)))


class CupyFramework:
    name = "cupy"

    def __init__(self):
        import cupy

        self.cupy = cupy

    def tensor(self, size, fill):
        with self.cupy.cuda.Device(0):
            return self.cupy.full((size,), fill, dtype=self.cupy.uint8)

    def sync(self):
        self.cupy.cuda.get_current_stream().synchronize()

    def describe(self, y):
        dev = getattr(y, "device", None)
        return "%s.%s on %s" % (type(y).__module__.split(".")[0], type(y).__name__, dev)

    def equal(self, x, y):
        y = self.cupy.from_dlpack(y) if not isinstance(y, self.cupy.ndarray) else y
        return bool((x == y).all())


class HostFramework:
    """--framework host: numpy arrays (torch CPU tensors on torch's side), a
    dry run of this harness where there is no GPU; not a device figure."""
    name = "host"

    def __init__(self):
        import numpy

        self.np = numpy

    def tensor(self, size, fill):
        return self.np.full((size,), fill, dtype=self.np.uint8)

    def sync(self):
        pass

    def describe(self, y):
        return "%s.%s" % (type(y).__module__.split(".")[0], type(y).__name__)

    def equal(self, x, y):
        return bool((self.np.asarray(x) == self.np.asarray(y)).all())


class TorchHostFramework(TorchFramework):
    name = "torch-host"

    def tensor(self, size, fill):
        return self.torch.full((size,), fill, dtype=self.torch.uint8)

    def sync(self):
        pass


FRAMEWORKS = {"torch": TorchFramework, "cupy": CupyFramework, "host": HostFramework}


# ---- the two systems behind one interface -----------------------------------

class Ferry:
    name = "ferry"

    def __init__(self, args):
        import ferry

        self.rpc = ferry
        self.args = args
        self.fw = FRAMEWORKS[args.framework]()
        self.info = {"backend": args.ferry_backend, "busy_poll": args.busy_poll,
                     "framework": args.framework}

    def init(self, role, store):
        self.rpc.init_rpc(role, backend=self.args.ferry_backend, store=store,
                          host_store=(role == "caller"), busy_poll=self.args.busy_poll)
        if role == "caller":
            self.rpc.wait_for_workers(2, timeout=60)

    def serve(self):
        import threading

        global _stop
        _stop = threading.Event()
        _stop.wait()
        self.rpc.shutdown()

    def finish(self):
        self.rpc.rpc_async("callee", _stop_callee)
        self.rpc.shutdown()


class Torch:
    name = "torch"

    def __init__(self, args):
        import torch.distributed.rpc as rpc

        self.rpc = rpc
        self.args = args
        self.host = args.framework == "host"
        self.fw = TorchHostFramework() if self.host else TorchFramework()
        self.staged = not self.host and (
            args.torch_path == "staged" or
            not hasattr(rpc.TensorPipeRpcBackendOptions, "set_device_map"))
        self.info = {"backend": "TensorPipe", "framework": "torch",
                     "device_map": not self.staged and not self.host,
                     "path": ("host staging: .cpu() before the call, .cuda() after"
                              if self.staged else
                              "host tensors (--framework host: a dry run)" if self.host else
                              "set_device_map(peer, {0: 0}); TensorPipe picks its channel "
                              "(cuda_ipc where it was built with it)")}

    def init(self, role, store):
        host, port = store.split(":")
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, port
        opts = self.rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=120)
        if not self.staged and not self.host:
            peer = "callee" if role == "caller" else "caller"
            opts.set_device_map(peer, {0: 0})
        self.rpc.init_rpc(role, rank=0 if role == "caller" else 1, world_size=2,
                          rpc_backend_options=opts)
        try:  # for the record: what TensorPipe's agent says of itself
            from torch.distributed.rpc import api

            info = api._get_current_rpc_agent().get_debug_info()
            self.info["agent"] = dict(info)
        except Exception as e:  # noqa: BLE001 (private API; informative only)
            self.info["agent"] = "unavailable: %s" % e

    def serve(self):
        self.rpc.shutdown()

    def finish(self):
        self.rpc.shutdown()


SYSTEMS = {"ferry": Ferry, "torch": Torch}


# ---- measurements (caller side) ----------------------------------------------

def _summary(samples_s):
    s = sorted(samples_s)
    return {"n": len(s), "median_us": statistics.median(s) * 1e6,
            "p99_us": s[min(len(s) - 1, int(len(s) * 0.99))] * 1e6, "min_us": s[0] * 1e6}


def measure(system, args):
    rpc, fw = system.rpc, system.fw
    staged = getattr(system, "staged", False)
    clock = time.perf_counter
    out = {"info": system.info}

    for _ in range(200):
        rpc.rpc_sync("callee", noop)
    samples = []
    for _ in range(args.iters):
        t0 = clock()
        rpc.rpc_sync("callee", noop)
        samples.append(clock() - t0)
    out["rpc_sync_noop"] = _summary(samples)

    def call(x):
        if staged:
            return rpc.rpc_sync("callee", echo, args=(x.cpu(),)).cuda()
        return rpc.rpc_sync("callee", echo, args=(x,))

    results = {}
    for size in args.sizes:
        fill = (size >> 10) % 251 + 1
        x = fw.tensor(size, fill)
        fw.sync()
        y = call(x)  # warm-up, and the correctness check (outside the clock)
        fw.sync()
        r = {"result": fw.describe(y), "on_device": on_gpu(y), "equal": fw.equal(x, y)}
        del y
        if not r["equal"]:
            raise SystemExit("%s: the %s echo came back different" % (system.name, _size_name(size)))
        n = max(5, min(args.iters, int(args.echo_bytes // size)))
        for _ in range(min(n, 20)):
            call(x)
        fw.sync()
        samples = []
        for _ in range(n):
            t0 = clock()
            y = call(x)
            fw.sync()
            samples.append(clock() - t0)
            del y
        r.update(_summary(samples))
        r["GBps_round_trip"] = 2 * size / (r["median_us"] * 1e-6) / 1e9
        results[str(size)] = r
        print("  %-6s %-8s median %10.1f us  p99 %10.1f us  (%s)" % (
            system.name, _size_name(size), r["median_us"], r["p99_us"], r["result"]),
            file=sys.stderr, flush=True)
    out["device_echo"] = results
    return out


# ---- processes --------------------------------------------------------------

def run_role(args):
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    system = SYSTEMS[args.system](args)
    system.fw.tensor(1, 0)  # the CUDA context, before any call arrives
    system.fw.sync()
    system.init(args.role, args.store)
    if args.role == "callee":
        system.serve()
        return
    result = measure(system, args)
    system.finish()
    print("RESULT " + json.dumps(result), flush=True)


def run_system(name, args):
    store = "127.0.0.1:%d" % free_port()
    base = [sys.executable, os.path.abspath(__file__), "--system", name, "--store", store,
            "--iters", str(args.iters), "--echo-bytes", str(args.echo_bytes),
            "--sizes", ",".join(str(s) for s in args.sizes), "--framework", args.framework,
            "--ferry-backend", args.ferry_backend, "--torch-path", args.torch_path] + \
        (["--busy-poll"] if args.busy_poll else [])
    cpus = [None, None] if args.cpus == "none" else [int(c) for c in args.cpus.split(",")]
    pin = lambda cpu: [] if cpu is None else ["--cpu", str(cpu)]  # noqa: E731
    try:
        return run_pair(name, base + pin(cpus[0]), base + pin(cpus[1]), timeout=args.timeout)
    except PairFailed as e:
        return {"failed": str(e) + (" (--timeout)" if "timed out" in str(e) else "")}


def _size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def _parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def goals(results):
    f, t = results.get("ferry", {}), results.get("torch", {})
    rows = []
    if "device_echo" in f and "device_echo" in t:
        for key, fr in f["device_echo"].items():
            tr = t["device_echo"].get(key)
            if tr is None:
                continue
            size = int(key)
            target = 3.0 if size <= 1 << 20 else 1.0
            speedup = tr["median_us"] / fr["median_us"]
            rows.append({"metric": "device echo %s median (us)" % _size_name(size), "bytes": size,
                         "torch": tr["median_us"], "ferry": fr["median_us"],
                         "speedup": speedup, "target": target, "met": speedup >= target})
    if "device_echo" in f and str(4 << 10) in f["device_echo"]:
        dev, noop_ = f["device_echo"][str(4 << 10)]["median_us"], f["rpc_sync_noop"]["median_us"]
        rows.append({"metric": "ferry 4 KiB device / ferry no-op", "bytes": 4 << 10, "torch": None,
                     "ferry": dev / noop_, "speedup": None, "target": 2.0,
                     "met": dev / noop_ <= 2.0})
    return rows


def check_gpu(framework):
    """None when a GPU is usable from `framework` and torch, else why not."""
    try:
        import torch
    except ImportError as e:
        return "torch is not installed (%s)" % e
    if not torch.cuda.is_available():
        return "torch sees no CUDA device (torch %s, built for CUDA %s)" % (
            torch.__version__, torch.version.cuda)
    if framework == "cupy":
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "CuPy sees no CUDA device"
        except Exception as e:  # noqa: BLE001 (ImportError, CUDARuntimeError)
            return "CuPy is not usable: %s" % e
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", choices=SYSTEMS)
    p.add_argument("--role", choices=("caller", "callee"))
    p.add_argument("--store")
    p.add_argument("--cpu", type=int)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="e.g. 4K,1M,64M,256M")
    p.add_argument("--iters", type=int, default=1000, help="round trips per figure")
    p.add_argument("--echo-bytes", type=float, default=2 * (1 << 30),
                   help="bytes per echo size (fewer round trips for large sizes)")
    p.add_argument("--framework", choices=FRAMEWORKS, default="torch")
    p.add_argument("--ferry-backend", default="shm,cuda_ipc")
    p.add_argument("--busy-poll", action="store_true", help="ferry spins (torch cannot)")
    p.add_argument("--cpus", default="none",
                   help="pin the caller and the callee to these CPUs (A,B); default none: "
                        "torch's RPC threads would share one CPU")
    p.add_argument("--timeout", type=int, default=600, help="seconds per system")
    p.add_argument("--torch-path", choices=("device-map", "staged"), default="device-map",
                   help="torch's side: TensorPipe with a device map (falls back to staged "
                        "when that fails or this torch has none), or staged through host")
    p.add_argument("--json")
    p.add_argument("--only", choices=SYSTEMS, help="run one system")
    args = p.parse_args()
    args.sizes = [_parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if args.role:
        run_role(args)
        return 0

    why = None if args.framework == "host" else check_gpu(args.framework)
    if why:
        print("bench_torch.py: no GPU: %s; nothing measured" % why, file=sys.stderr)
        return EXIT_NO_GPU
    try:
        import ferry  # noqa: F401
    except ImportError as e:
        print("bench_torch.py: cannot import ferry (%s): put the built extension on "
              "PYTHONPATH (build/python, or bindings/python/build_extension.sh's output)" % e,
              file=sys.stderr)
        return 1

    systems = [args.only] if args.only else ["ferry", "torch"]
    notes = []
    torch = None
    try:
        import torch
        import torch.distributed.rpc as trpc

        if not trpc.is_available():
            raise ImportError("torch.distributed.rpc.is_available() is False")
    except ImportError as e:
        notes.append("torch side not measured: %s" % e)
        systems = [s for s in systems if s != "torch"]

    load_before = os.getloadavg()
    results = {}
    for name in systems:
        print("== %s" % name, file=sys.stderr, flush=True)
        results[name] = run_system(name, args)
        if name == "torch" and "failed" in results[name] and args.torch_path == "device-map" \
                and args.framework != "host":
            notes.append("torch with a device map failed (%s): its side was measured again "
                         "staged through host memory" % results[name]["failed"])
            args.torch_path = "staged"
            results["torch_device_map"] = results[name]
            results[name] = run_system(name, args)
    report = {"benchmark": "bench_torch.py (cuda_ipc)",
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(),
                          "torch": torch.__version__ if torch else None,
                          "torch_cuda": torch.version.cuda if torch else None,
                          "gpu": (torch.cuda.get_device_name(0)
                                  if torch and torch.cuda.is_available() else None),
                          "load_before": load_before, "load_after": os.getloadavg()},
              "config": {"sizes": args.sizes, "iters": args.iters,
                         "echo_bytes": args.echo_bytes, "framework": args.framework,
                         "ferry_backend": args.ferry_backend, "busy_poll": args.busy_poll,
                         "cpus": args.cpus,
                         "timing": "rpc_sync + the caller's current stream synchronised"},
              "notes": notes, "results": results, "goals": goals(results)}
    for key, r in results.get("ferry", {}).get("device_echo", {}).items():
        if not r["on_device"] and args.framework != "host":
            notes.append("ferry's %s echo came back as %s, not in GPU memory (staged?)"
                         % (_size_name(int(key)), r["result"]))
    for n in notes:
        print("note: " + n)
    f = results.get("ferry", {})
    if "rpc_sync_noop" in f:
        print("ferry no-op rpc_sync median %.1f us (p99 %.1f)" % (
            f["rpc_sync_noop"]["median_us"], f["rpc_sync_noop"]["p99_us"]))
    t = results.get("torch", {})
    if "info" in t:
        print("torch side: %s" % t["info"]["path"])
    print("%-36s %12s %12s %9s %10s" % ("metric", "torch", "ferry", "speedup", "goal"))
    for r in report["goals"]:
        print("%-36s %12s %12.2f %9s %10s" % (
            r["metric"], "-" if r["torch"] is None else "%.1f" % r["torch"], r["ferry"],
            "-" if r["speedup"] is None else "%.2fx" % r["speedup"],
            ("%s %s" % ("<=" if r["speedup"] is None else ">=", "%gx" % r["target"])) +
            (" PASS" if r["met"] else " MISS")))
    failed = [n for n, r in results.items() if "failed" in r]
    for n in failed:
        print("%s: %s" % (n, results[n]["failed"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
        print("wrote %s" % args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
