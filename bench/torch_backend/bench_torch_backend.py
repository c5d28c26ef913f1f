"""torch.distributed.rpc over FERRY beside torch.distributed.rpc over
TENSORPIPE: the same program, the same placement (two processes on this
machine), only the backend differs.

    PYTHONPATH=<build>/python bench/torch_backend/bench_torch_backend.py \
        [--systems TENSORPIPE,FERRY-shm,FERRY-tcp] [--iters N] [--json FILE]

A system named FERRY-<transport>+busy runs FERRY with busy_poll=True (its
progress thread spins between messages, as TensorPipe's shared-memory
transport does).

Measured by rank 0 against rank 1: a no-op rpc_sync; rpc_async with 64
calls in flight (time per call); tensor echo (rpc_sync returning its
argument) from 1 KiB to 64 MiB; RRef create+delete (remote(), to_here(),
del). And a no-op rpc_sync to rank 0 itself: torch's own Python and C++
layers plus the agent's local path, the floor under every remote call.
Prints each figure with FERRY's ratio to TENSORPIPE (< 1: FERRY faster).
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from bench_pair import PairFailed, free_port, run_pair  # noqa: E402

SIZES = [1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def noop():
    return None


def echo(t):
    return t


def timed(fn, iters):
    """Median seconds of one fn() over iters runs (after a warm-up)."""
    for _ in range(max(3, iters // 10)):
        fn()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def caller(rpc, torch, iters):
    peer = "worker1"
    r = {}
    r["noop_rpc_sync_us"] = timed(lambda: rpc.rpc_sync(peer, noop), iters) * 1e6
    r["noop_self_rpc_sync_us"] = timed(lambda: rpc.rpc_sync("worker0", noop), iters) * 1e6

    def inflight():
        futs = [rpc.rpc_async(peer, noop) for _ in range(64)]
        for f in futs:
            f.wait()
    r["rpc_async_64_inflight_us_per_call"] = timed(inflight, max(5, iters // 20)) * 1e6 / 64

    for size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        n = max(5, min(iters, (256 << 20) // size))
        r["echo_%d_us" % size] = timed(lambda: rpc.rpc_sync(peer, echo, args=(t,)), n) * 1e6

    def rref_cycle():
        rref = rpc.remote(peer, torch.add, args=(torch.ones(1), 1))
        rref.to_here()
        del rref
    r["rref_create_delete_us"] = timed(rref_cycle, iters) * 1e6
    return r


def run_role(args):
    import torch
    import torch.distributed.rpc as rpc

    name, busy, _ = args.system.partition("+busy")
    backend, _, transport = name.partition("-")
    rank = 0 if args.role == "caller" else 1
    init = "tcp://127.0.0.1:%d" % args.port
    if backend == "FERRY":
        import ferry.torch
        opts = ferry.torch.FerryRpcBackendOptions(transport=transport, init_method=init,
                                                  busy_poll=bool(busy))
    else:
        opts = rpc.TensorPipeRpcBackendOptions(init_method=init)
    rpc.init_rpc("worker%d" % rank, backend=rpc.BackendType[backend], rank=rank, world_size=2,
                 rpc_backend_options=opts)
    result = caller(rpc, torch, args.iters) if rank == 0 else None
    rpc.shutdown()
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="TENSORPIPE,FERRY-shm,FERRY-tcp")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--system", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        return run_role(args)

    results = {}
    for system in args.systems.split(","):
        cmd = [sys.executable, __file__, "--system", system, "--iters", str(args.iters),
               "--port", str(free_port())]
        try:
            results[system] = run_pair(system, cmd, cmd, timeout=900)
        except PairFailed as e:
            print("%s: %s" % (system, e), file=sys.stderr)
            return 1
    ref = results.get("TENSORPIPE")
    keys = list(next(iter(results.values())).keys())
    print("%-36s" % "median, us" + "".join("%18s" % s for s in results))
    for k in keys:
        row = "%-36s" % k
        for s, r in results.items():
            cell = "%.1f" % r[k]
            if ref is not None and s != "TENSORPIPE":
                cell += " (%.2fx)" % (r[k] / ref[k])
            row += "%18s" % cell
        print(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"what": "torch.distributed.rpc: FERRY vs TENSORPIPE, 2 processes, "
                               "one host, medians in microseconds",
                       "iters": args.iters, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
