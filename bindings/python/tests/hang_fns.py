"""Functions for test_debug_dump.py: a chain of calls that hangs on purpose
until the test releases it."""

import threading

import ferry

RELEASE = threading.Event()
STARTED = threading.Event()


def hang():
    """Blocks until release() (or 60 s)."""
    STARTED.set()
    return RELEASE.wait(60)


def relay(to):
    """Calls hang() on `to`: a nested call."""
    return ferry.rpc_sync(to, hang)


def wait_started(timeout):
    return STARTED.wait(timeout)


def release():
    RELEASE.set()
    return True
