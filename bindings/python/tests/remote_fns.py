"""Functions the tests call on worker processes. Module-level, so they go
by reference; importable on both sides (the tests' directory is on the
path of the test process and of every worker it starts)."""

import os
import signal
import threading
import time

import numpy as np

import ferry

STOP = threading.Event()
_gate = threading.Event()


def stop():
    STOP.set()


def add(a, b):
    return a + b


def slow_add(a, b, seconds):
    """A handler that takes a while (work, not synchronisation)."""
    import time

    time.sleep(seconds)
    return a + b


def echo(x):
    return x


def whoami():
    return ferry.get_worker_info().name


_per_thread = threading.local()


def count_on_this_thread():
    """(the handler thread's id, how many calls that thread has served): a
    handler's thread-local state lives as long as its thread, as on any
    Python thread (and in torch.distributed.rpc)."""
    _per_thread.n = getattr(_per_thread, "n", 0) + 1
    return threading.get_ident(), _per_thread.n


def describe(x):
    """What arrived: its type and, for arrays, writability and dtype."""
    if isinstance(x, np.ndarray):
        return ("numpy", str(x.dtype), x.shape, x.flags.writeable)
    return (type(x).__module__ + "." + type(x).__name__,)


def fail_with(kind, text):
    raise {"value": ValueError, "key": KeyError, "custom": CustomError}[kind](text)


class CustomError(Exception):
    pass


class Unconstructible(Exception):
    def __init__(self, a, b):
        super().__init__(a, b)


def fail_unconstructible():
    raise Unconstructible(1, 2)


def wait_gate(timeout):
    """Blocks until release_gate() runs (or timeout): a call that stays
    pending, without sleeping a fixed time."""
    return _gate.wait(timeout)


def release_gate():
    _gate.set()


def kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


def call_other(to, func, args):
    """A nested, blocking call from inside a handler."""
    return ferry.rpc_sync(to, func, args=args)


@ferry.functions.async_execution
def async_add_via(to, a, b):
    return ferry.rpc_async(to, add, args=(a, b)).then(lambda f: f.value() * 10)


@ferry.functions.async_execution
def async_not_a_future():
    return 42


class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, by=1):
        self.value += by
        return self.value

    def get(self):
        return self.value


def counter_get(rref):
    """Runs where it is sent: reads an RRef (a fork when not the owner)."""
    return rref.to_here().value


def rref_owner_name(rref):
    return rref.owner_name()


def make_rref(value):
    """Returns an RRef this worker owns."""
    return ferry.RRef(value)


def stats():
    return ferry.stats()


def sum_tensors(tree):
    """Sums every array in a nested structure (dicts, lists, tuples)."""
    if isinstance(tree, dict):
        return sum(sum_tensors(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(sum_tensors(v) for v in tree)
    return float(tree.sum()) if hasattr(tree, "sum") else float(tree)


def is_same_object(a, b):
    return a is b


def torch_describe(t):
    import torch

    return (isinstance(t, torch.Tensor), str(t.dtype), tuple(t.shape), bool(t.requires_grad))


def shutdown_soon():
    """Leaves gracefully from a helper thread (a handler cannot wait for
    its own call to be answered)."""
    threading.Thread(target=STOP.set).start()


# ---- device tensors (test_cuda_tensors.py) ----------------------------------

def scale(x, factor):
    return x * factor


def where_is(x):
    """(framework, CUDA device index or None) of what arrived here."""
    root = type(x).__module__.split(".")[0]
    device = getattr(x, "device", None)
    if root == "torch":
        return root, device.index if device.type == "cuda" else None
    if root == "cupy":
        return root, device.id
    return root, None


def make_on_device(framework, n, value, device):
    """A device tensor made here, returned to the caller."""
    if framework == "torch":
        import torch

        return torch.full((n,), value, dtype=torch.float32, device="cuda:%d" % device)
    import cupy

    with cupy.cuda.Device(device):
        return cupy.full((n,), value, dtype=cupy.float32)


def where_all(values):
    return [where_is(v) for v in values]


def transposed_on_device():
    import torch

    return torch.arange(20.0, device="cuda").reshape(4, 5).t()


# ---- no torn tensors (test_torn_tensors.py) ------------------------------------

def count_changed(x, value):
    """How many elements of x (numpy or torch) are not `value`."""
    if isinstance(x, np.ndarray):
        return int(np.count_nonzero(x != value))
    return int((x != value).sum())


def fresh_zeros(n):
    """A result nothing else references: sent without a copy."""
    return np.zeros(n, np.float32)


_KEPT = []


def kept_zeros(n, opt_in):
    """A result the handler keeps (a parameter server's weights): copied,
    unless returned as ferry.zero_copy()."""
    w = np.zeros(n, np.float32)
    _KEPT[:] = [w]
    return ferry.zero_copy(w) if opt_in else w


@ferry.functions.async_execution
def live_weights(n, updates, opt_in=False):
    """A parameter server that answers from its update thread with its live
    weights and goes on updating them in place right after: the caller must
    get them as they were when the result was set (all zeros); opt_in:
    returned as ferry.zero_copy(w), the updates may reach the caller."""
    w = np.zeros(n, np.float32)
    fut = ferry.Future()

    def serve():
        # Once ferry is waiting on the Future (its reply callback added):
        # set_result then answers the call on this thread.
        deadline = time.monotonic() + 10
        while not fut._callbacks and time.monotonic() < deadline:
            time.sleep(0.001)
        fut.set_result(ferry.zero_copy(w) if opt_in else w)
        for _ in range(updates):
            np.add(w, 1, out=w)

    threading.Thread(target=serve).start()
    return fut
