"""Functions test_errors.py calls on worker processes (module-level, so
they go by reference; the tests' directory is on every worker's path)."""

import os
import threading
import time


def exit_with(code):
    raise SystemExit(code)


def interrupt():
    raise KeyboardInterrupt("stop right there")


def key_error(key):
    return {}[key]


def open_missing(path):
    with open(path):
        pass


def value_error(*args):
    raise ValueError(*args)


class Detailed(Exception):
    """An exception with a constructor and an attribute of its own."""

    def __init__(self, what, detail):
        super().__init__(what, detail)
        self.detail = detail
        self.seen = "on the callee"


def raise_detailed():
    raise Detailed("bad", 42)


class Locked(Exception):
    """Cannot be pickled: it holds a lock."""

    def __init__(self, text):
        super().__init__(text)
        self.lock = threading.Lock()


def raise_locked():
    raise Locked("holds a lock")


class Mismatched(Exception):
    """Pickles, but cannot be unpickled: its args do not fit its constructor."""

    def __init__(self, a, b):
        super().__init__("%s and %s" % (a, b))


def raise_mismatched():
    raise Mismatched(1, 2)


def raise_callee_only():
    import callee_only

    raise callee_only.CalleeOnlyError("only the callee knows this type")


def make_callee_only():
    import callee_only

    return callee_only.Thing(7)


def hold(started_path, release_path, limit):
    """Says it started (a file), then runs until release_path exists."""
    with open(started_path, "w"):
        pass
    end = time.monotonic() + limit
    while not os.path.exists(release_path) and time.monotonic() < end:
        time.sleep(0.01)
    return "held"
