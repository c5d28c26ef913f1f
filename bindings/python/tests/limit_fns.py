"""Functions test_limits.py calls on its worker processes: a gate that
holds calls pending, and a flood of calls from one worker to another."""

import os
import threading
import time

import ferry
from ferry._errors import OK, RESOURCE_EXHAUSTED

_gate = threading.Event()


def wait_gate(timeout):
    """Stays pending until release_gate() runs here (or `timeout`)."""
    return _gate.wait(timeout)


def release_gate():
    _gate.set()


def release_on(to):
    """Opens `to`'s gate (a relay: the caller's own calls to `to` may be
    at their limit)."""
    ferry.rpc_sync(to, release_gate)


def wait_file(path, timeout):
    """Stays pending until `path` exists (or `timeout`): a gate that opens
    without a call, for a callee whose call queue is full."""
    end = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.01)  # polling the file system
    return os.path.exists(path)


def flood(to, n, gate_path, timeout):
    """Makes `n` calls of wait_file(gate_path) to `to`; once half of them
    were refused (or `timeout` passed) creates the file, so the calls that
    `to` queued run; returns (ok, refused, other, the first refusal's
    message)."""
    futures = [ferry.rpc_async(to, wait_file, args=(gate_path, timeout), timeout=timeout + 30)
               for _ in range(n)]
    end = time.monotonic() + timeout

    def refused():
        return [f for f in futures if f.done() and _code(f) == RESOURCE_EXHAUSTED]

    while len(refused()) < n // 2 and time.monotonic() < end:
        time.sleep(0.01)  # polling futures another thread completes
    open(gate_path, "w").close()
    ok = other = 0
    first = ""
    for f in futures:
        try:
            f.wait()
            ok += 1
        except ferry.FerryError as e:
            if e.code == RESOURCE_EXHAUSTED:
                first = first or str(e)
            else:
                other += 1
    return ok, len(refused()), other, first


def _code(f):
    try:
        f.wait()
        return OK
    except ferry.FerryError as e:
        return e.code
