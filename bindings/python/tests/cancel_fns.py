"""Functions the deadline and cancellation tests (test_deadlines.py) call on
worker processes."""

import threading
import time

import ferry

_started = threading.Event()
_seen_cancel = threading.Event()
_futures = []


def call_info():
    """What ferry.current_call() tells a handler."""
    c = ferry.current_call()
    return (c.function, c.caller.name, c.remaining, c.deadline is not None, c.cancelled)


def outside_a_handler():
    """current_call() on a thread that serves no call."""
    out = []
    t = threading.Thread(target=lambda: out.append(ferry.current_call()))
    t.start()
    t.join()
    return out[0] is None


def nested_info(to, timeout=None):
    """call_info on `to`, called from inside this handler (no timeout of its
    own: it inherits what is left of this call's deadline)."""
    return ferry.rpc_sync(to, call_info, timeout=timeout)


def slow(seconds):
    """Work that takes a while (a handler busy computing)."""
    _started.set()
    time.sleep(seconds)
    return seconds


def until_cancelled(limit):
    """Runs until its caller gives up (or `limit` seconds): a handler that
    checks the flag between steps of its work."""
    c = ferry.current_call()
    _started.set()
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if c.cancelled:
            _seen_cancel.set()
            return "stopped"
        time.sleep(0.01)  # one step of the work
    return "ran to the end"


def wait_started(timeout):
    return _started.wait(timeout)


def saw_cancel(timeout):
    return _seen_cancel.wait(timeout)


def flood(to, n, seconds):
    """Starts n slow calls to `to` and returns once the first is answered
    (so all n are there, the rest queued), keeping the others pending."""
    _futures[:] = [ferry.rpc_async(to, slow, args=(seconds,), timeout=60) for _ in range(n)]
    _futures[0].wait()
    return n


def dropped():
    return ferry.stats()["dropped_calls"]


def relay(to):
    """A blocking nested call: this handler thread waits for `to`."""
    return ferry.rpc_sync(to, _add, args=(1, 2))


@ferry.functions.async_execution
def relay_async(to):
    """The same work written with async_execution (no thread waits)."""
    return ferry.rpc_async(to, _add, args=(1, 2))


def _add(a, b):
    return a + b


def throughput(to, func, n, in_flight, *args):
    """Calls per second of n calls of func(*args) on `to`, `in_flight` at a
    time."""
    t0 = time.monotonic()
    pending = []
    for _ in range(n):
        pending.append(ferry.rpc_async(to, func, args=args))
        if len(pending) >= in_flight:
            pending.pop(0).wait()
    for f in pending:
        f.wait()
    return n / (time.monotonic() - t0)


def bounce(to, back):
    """A call to `to` that calls back here (`back`) before answering: blocking
    nested calls both ways."""
    return ferry.rpc_sync(to, relay, args=(back,))


def chains(to, back, n):
    """n bounce calls to `to` in flight at once from this worker's handler."""
    futs = [ferry.rpc_async(to, bounce, args=(back, to), timeout=20) for _ in range(n)]
    return [f.wait() for f in futs]
