#!/usr/bin/env python3
"""ferry beside torch.distributed.rpc (TensorPipe), one run, same machine,
same process placement (caller pinned to one CPU, callee to another).

    PYTHONPATH=build/python /usr/bin/python3 bench/python/rpc_vs_torch.py \
        --json docs/benchmarks/python-rpc.json

Measures, for each system: no-op rpc_sync latency, rpc_async throughput
with 64 calls in flight, tensor echo 1 KiB .. 64 MiB, remote()+to_here(),
and RRef create+delete; prints a table of ratios (torch / ferry: above 1
means ferry is faster) and writes every figure as JSON. Run it on a quiet
machine: it reports the load average before and after.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

from bench_pair import PairFailed, free_port, run_pair

SIZES = [1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20]


# ---- functions the callee runs (by reference: this module on both sides) ----

def noop():
    return None


def echo(x):
    return x


class Box:
    def __init__(self, x=None):
        self.x = x


# ---- the two systems behind one interface -----------------------------------

class Ferry:
    name = "ferry"

    def __init__(self, args):
        import ferry

        self.rpc = ferry
        self.args = args

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

    def drain_rrefs(self):
        deadline = time.monotonic() + 30
        while self.rpc.rpc_sync("callee", _owned_rrefs) != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("ferry: RRefs not deleted after 30 s")

    def to_tensor(self, size):
        import numpy as np

        return np.ones(size, dtype=np.uint8)


_stop = None


def _stop_callee():
    _stop.set()


def _owned_rrefs():
    import ferry

    return ferry.stats()["owned_rrefs"]


class Torch:
    name = "torch"

    def __init__(self, args):
        import torch.distributed.rpc as rpc

        self.rpc = rpc
        self.args = args

    def init(self, role, store):
        host, port = store.split(":")
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, port
        opts = self.rpc.TensorPipeRpcBackendOptions(num_worker_threads=16, rpc_timeout=120)
        self.rpc.init_rpc(role, rank=0 if role == "caller" else 1, world_size=2,
                          rpc_backend_options=opts)

    def serve(self):
        self.rpc.shutdown()

    def finish(self):
        self.rpc.shutdown()

    def drain_rrefs(self):
        # torch has no owner-side count to wait on; its deletions are
        # asynchronous and a final call flushes what this caller sent.
        self.rpc.rpc_sync("callee", noop)

    def to_tensor(self, size):
        import torch

        return torch.ones(size, dtype=torch.uint8)


SYSTEMS = {"ferry": Ferry, "torch": Torch}


# ---- measurements (caller side) ----------------------------------------------

def _summary(samples_s):
    s = sorted(samples_s)
    return {"n": len(s), "median_us": statistics.median(s) * 1e6,
            "p99_us": s[min(len(s) - 1, int(len(s) * 0.99))] * 1e6, "min_us": s[0] * 1e6}


def measure(system, args):
    rpc = system.rpc
    out = {}
    clock = time.perf_counter

    for _ in range(200):
        rpc.rpc_sync("callee", noop)
    samples = []
    for _ in range(args.iters):
        t0 = clock()
        rpc.rpc_sync("callee", noop)
        samples.append(clock() - t0)
    out["rpc_sync_noop"] = _summary(samples)

    calls, window = args.iters * 4, 64
    t0 = clock()
    inflight = [rpc.rpc_async("callee", noop) for _ in range(window)]
    issued = window
    while inflight:
        inflight.pop(0).wait()
        if issued < calls:
            inflight.append(rpc.rpc_async("callee", noop))
            issued += 1
    elapsed = clock() - t0
    out["rpc_async_64"] = {"calls": calls, "calls_per_s": calls / elapsed}

    echo_results = {}
    for size in SIZES:
        x = system.to_tensor(size)
        n = max(5, min(args.iters, int(args.echo_bytes // size)))
        rpc.rpc_sync("callee", echo, args=(x,))
        samples = []
        for _ in range(n):
            t0 = clock()
            y = rpc.rpc_sync("callee", echo, args=(x,))
            samples.append(clock() - t0)
            del y
        r = _summary(samples)
        r["bandwidth_MBps"] = 2 * size / (r["median_us"] * 1e-6) / 1e6
        echo_results[str(size)] = r
    out["tensor_echo"] = echo_results

    n = max(50, args.iters // 4)
    samples = []
    for i in range(n):
        t0 = clock()
        rref = rpc.remote("callee", Box, args=(i,))
        rref.to_here()
        samples.append(clock() - t0)
        del rref
    system.drain_rrefs()
    out["remote_to_here"] = _summary(samples)

    n = args.iters
    t0 = clock()
    for _ in range(n):
        rref = rpc.remote("callee", noop)
        del rref
    system.drain_rrefs()
    out["rref_create_delete"] = {"n": n, "amortized_us": (clock() - t0) / n * 1e6}
    return out


# ---- processes --------------------------------------------------------------

def run_role(args):
    system = SYSTEMS[args.system](args)
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
            "--ferry-backend", args.ferry_backend] + (["--busy-poll"] if args.busy_poll else [])
    pin = (lambda cpu: ["taskset", "-c", str(cpu)]) if args.pin else (lambda cpu: [])
    try:
        return run_pair(name, pin(0) + base, pin(1) + base, timeout=1800)
    except PairFailed as e:
        raise SystemExit("%s %s" % (name, e))


def ratio_table(results):
    f, t = results["ferry"], results["torch"]
    rows = [("no-op rpc_sync median (us)", t["rpc_sync_noop"]["median_us"],
             f["rpc_sync_noop"]["median_us"], 5.0),
            ("rpc_async, 64 in flight (calls/s)", t["rpc_async_64"]["calls_per_s"],
             f["rpc_async_64"]["calls_per_s"], 5.0),
            ("remote()+to_here() median (us)", t["remote_to_here"]["median_us"],
             f["remote_to_here"]["median_us"], None),
            ("RRef create+delete amortized (us)", t["rref_create_delete"]["amortized_us"],
             f["rref_create_delete"]["amortized_us"], 5.0)]
    for size in SIZES:
        target = 3.0 if size == 64 << 20 else None
        rows.append(("tensor echo %s median (us)" % _size_name(size),
                     t["tensor_echo"][str(size)]["median_us"],
                     f["tensor_echo"][str(size)]["median_us"], target))
    table = []
    for label, tv, fv, target in rows:
        speedup = fv / tv if "calls/s" in label else tv / fv
        table.append({"metric": label, "torch": tv, "ferry": fv, "speedup": speedup,
                      "target": target, "met": None if target is None else speedup >= target})
    return table


def _size_name(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", choices=SYSTEMS)
    p.add_argument("--role", choices=("caller", "callee"))
    p.add_argument("--store")
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--echo-bytes", type=float, default=1 << 30,
                   help="bytes per echo size (fewer round trips for large sizes)")
    p.add_argument("--ferry-backend", default="shm")
    p.add_argument("--busy-poll", action="store_true", help="ferry spins (torch cannot)")
    p.add_argument("--no-pin", dest="pin", action="store_false")
    p.add_argument("--json")
    p.add_argument("--only", choices=SYSTEMS, help="run one system (smoke tests)")
    args = p.parse_args()
    if args.role:
        run_role(args)
        return
    load_before = os.getloadavg()
    results = {}
    for name in ([args.only] if args.only else ["ferry", "torch"]):
        results[name] = run_system(name, args)
    report = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(),
                          "load_before": load_before, "load_after": os.getloadavg()},
              "config": {"iters": args.iters, "ferry_backend": args.ferry_backend,
                         "busy_poll": args.busy_poll, "pinned": args.pin,
                         "torch_backend": "TensorPipe (defaults: shm transport on one host)"},
              "results": results}
    if not args.only:
        report["ratios"] = ratio_table(results)
        print("%-38s %14s %14s %9s %7s" % ("metric", "torch", "ferry", "speedup", "target"))
        for r in report["ratios"]:
            print("%-38s %14.1f %14.1f %8.2fx %7s" % (
                r["metric"], r["torch"], r["ferry"], r["speedup"],
                "" if r["target"] is None else ("%.0fx %s" % (r["target"], "ok" if r["met"] else "MISS"))))
    else:
        print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
