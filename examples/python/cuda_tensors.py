#!/usr/bin/env python3
"""Device tensors through ferry: a CUDA tensor passed to rpc_sync lands in
the callee's GPU memory, and the result comes back into ours, as the same
framework's tensor on the same device (docs/python.md, "Device tensors").

    x = torch.randn(64 << 20, device="cuda")         # or a CuPy array
    y = ferry.rpc_sync("gpu-worker", scale, args=(x, 2.0))

Two processes on this host: this one, and a worker it starts. Uses torch
when it has CUDA, else CuPy; without a CUDA device it says so and exits 0
having checked nothing.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/cuda_tensors.py
"""

import os
import subprocess
import sys
import time


def framework():
    """("torch" | "cupy", module), or (None, why not)."""
    why = []
    try:
        import torch

        if torch.cuda.is_available():
            return "torch", torch
        why.append("torch %s has no CUDA device" % torch.__version__)
    except ImportError:
        why.append("torch is not installed")
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return "cupy", cupy
        why.append("CuPy finds no device")
    except ImportError:
        why.append("CuPy is not installed")
    except Exception as e:  # noqa: BLE001 - CuPy's CUDA errors
        why.append("CuPy: %s" % e)
    return None, "; ".join(why)


# ---- what the worker runs (by reference: this file is its __main__ too) -----

def scale(x, factor):
    return x * factor


def where(x):
    """What arrived here: its type and CUDA device index."""
    device = x.device
    index = device.index if hasattr(device, "index") else device.id  # torch, CuPy
    return type(x).__module__ + "." + type(x).__name__, index


def make(n, value):
    """A tensor made on this worker's GPU, returned to the caller."""
    name, fw = framework()
    if name == "torch":
        return fw.full((n,), value, device="cuda")
    return fw.full((n,), value, dtype=fw.float32)


def worker(store):
    import ferry

    framework()  # import the framework first, on the main thread, as programs do
    ferry.init_rpc("gpu-worker", store=store)
    print("READY", flush=True)
    sys.stdin.read()  # until the launcher closes it
    ferry.shutdown()


# ---- the launcher ------------------------------------------------------------

def main():
    name, fw = framework()
    if name is None:
        print("cuda tensors example: nothing to check without a CUDA device (%s); "
              "example OK (skipped)" % fw)
        return 0
    import ferry

    ferry.init_rpc("launcher", store="127.0.0.1:0", host_store=True, peer_timeout=5.0)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                          ferry.store_address()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "READY", "the worker did not start"
        transport = ferry.get_worker_info("gpu-worker").transport
        print("framework %s, worker reached over %s" % (name, transport))
        for n_bytes in (4 << 10, 64 << 20):
            n = n_bytes // 4
            if name == "torch":
                x = fw.randn(n, device="cuda")
            else:
                x = fw.random.standard_normal(n, dtype=fw.float32)
            kind, index = ferry.rpc_sync("gpu-worker", where, args=(x,))
            start = time.perf_counter()
            y = ferry.rpc_sync("gpu-worker", scale, args=(x, 2.0), timeout=120)
            seconds = time.perf_counter() - start
            assert type(y) is type(x), (type(y), type(x))
            same_device = (y.device == x.device) if name == "torch" else (y.device.id == x.device.id)
            assert same_device, (y.device, x.device)
            assert bool((y == x * 2.0).all()), "wrong bytes"
            print("%9d bytes: arrived there as %s on cuda:%s; came back as %s on %s, "
                  "exactly 2x, in %.1f ms" % (n_bytes, kind, index, type(y).__name__, y.device,
                                               seconds * 1e3))
        y = ferry.rpc_sync("gpu-worker", make, args=(1 << 20, 3.5), timeout=120)
        assert type(y).__module__.split(".")[0] == name and bool((y == 3.5).all())
        print("a tensor the worker made on its GPU came back as %s on %s" % (type(y).__name__,
                                                                           y.device))
    finally:
        p.stdin.close()
        p.wait(timeout=60)
        ferry.shutdown()
    print("cuda tensors example OK")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        sys.exit(main())
