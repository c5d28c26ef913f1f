"""ferry.Future: torch.futures.Future's interface over ferry's futures.

A Future made by rpc_async wraps a C future: wait() drives the worker's
progress on the calling thread with the GIL released (no thread hop on the
fast path), and the value is decoded once, by whoever asks first.
Callbacks (then, add_done_callback, await) run on ferry's dispatcher
thread. A Future made by the user (Future()) is completed with set_result
or set_exception, as torch's is; async_execution functions return one.
"""

import threading

from . import _errors, _ferry

_FOREVER_MS = _ferry.FOREVER


def _timeout_ms(timeout):
    if timeout is None:
        return _FOREVER_MS
    if timeout < 0:
        raise ValueError("ferry: a timeout cannot be negative (None waits forever)")
    return min(int(timeout * 1000 + 0.999), _FOREVER_MS - 1)


class Future:
    def __init__(self, _handle=None, _decode=None, *, devices=None):
        """Future() makes one to complete with set_result / set_exception
        (torch's `devices` argument is accepted: ferry needs no device
        list to order CUDA work)."""
        del devices
        self._handle = _handle  # _ferry.Future, or None for a user-made one
        self._decode = _decode  # message -> value
        self._lock = threading.Lock()  # guards what follows
        # Only a user-made future is waited on in Python (one from rpc_async
        # waits in C, on its handle), so only it gets a Condition: building
        # one costs more than the rest of rpc_async's Python side.
        self._cond = threading.Condition(self._lock) if _handle is None else None
        self._resolved = False
        self._value = None
        self._exc = None
        self._callbacks = []
        self._hooked = False  # C continuation registered
        self._resolving = threading.Lock()  # one thread takes and decodes

    # ---- state -------------------------------------------------------
    def done(self):
        """True once the value or the error is there."""
        if self._resolved:
            return True
        return self._handle is not None and self._handle.done()

    def cancel(self):
        """Gives up on the call: the future fails with CancelledError and the
        callee is told (a call still queued there is not run; a running
        handler sees ferry.current_call().cancelled). False if it was done
        already. A user-made future is completed with the error."""
        if self._handle is not None:
            if not self._handle.cancel():
                return False
            self._resolve_from_handle()
            return True
        with self._lock:
            if self._resolved:
                return False
        try:
            self._complete(None, _errors.from_status(
                _errors.CANCELLED, "ferry: the future was cancelled"))
        except RuntimeError:  # completed meanwhile
            return False
        return True

    def wait(self, timeout=None):
        """Waits (at most `timeout` seconds) and returns the value, or raises
        the call's error; a TimeoutError if still pending after `timeout`."""
        if not self._resolved:
            if self._handle is not None:
                if not self._handle.wait(_timeout_ms(timeout)):
                    raise _errors.DeadlineExceededError(
                        "ferry: the future was not done after %ss; wait longer, or "
                        "check that the callee is alive" % timeout,
                        _errors.DEADLINE_EXCEEDED)
                self._resolve_from_handle()
            else:
                with self._cond:
                    if not self._cond.wait_for(lambda: self._resolved, timeout):
                        raise _errors.DeadlineExceededError(
                            "ferry: the future was not done after %ss" % timeout,
                            _errors.DEADLINE_EXCEEDED)
        return self.value()

    def value(self):
        """The value of a done future (raises its error); like torch, it does
        not wait: call wait() first, or check done()."""
        if not self._resolved:
            if self._handle is not None and self._handle.done():
                self._resolve_from_handle()
            else:
                raise RuntimeError("ferry: Future.value() on a future not done yet; "
                                   "call wait() instead")
        if self._exc is not None:
            raise self._exc
        return self._value

    # ---- user-made futures -------------------------------------------
    def set_result(self, result):
        self._complete(result, None)

    def set_exception(self, exc):
        self._complete(None, exc)

    # ---- continuations -----------------------------------------------
    def add_done_callback(self, callback):
        """Runs callback(self) once done (on ferry's dispatcher thread, or at
        once on this one if done already)."""
        with self._lock:
            if not self._resolved:
                self._callbacks.append(callback)
                hook = self._handle is not None and not self._hooked
                self._hooked = self._hooked or hook
                callback = None
        if callback is not None:
            callback(self)
        elif hook:
            self._handle.then(self._resolve_from_handle)

    def then(self, callback):
        """A new Future with callback(self)'s result (or its exception)."""
        chained = Future()

        def run(f):
            try:
                chained.set_result(callback(f))
            except BaseException as e:  # noqa: B036 - delivered, not swallowed
                chained.set_exception(e)

        self.add_done_callback(run)
        return chained

    def __await__(self):
        if not self.done():
            import asyncio

            loop = asyncio.get_running_loop()
            waiter = loop.create_future()

            def wake(_):
                loop.call_soon_threadsafe(lambda: waiter.done() or waiter.set_result(None))

            self.add_done_callback(wake)
            yield from waiter.__await__()
        return self.value()

    # ---- internals ---------------------------------------------------
    def _resolve_from_handle(self):
        with self._resolving:
            if self._resolved:
                return
            code, message = self._handle.status()
            value, exc = None, None
            if code == _errors.OK:
                try:
                    value = self._decode(self._handle.take())
                except BaseException as e:  # noqa: B036
                    exc = e
            else:
                exc = _errors.from_status(code, message)
            self._complete(value, exc)

    def _complete(self, value, exc):
        with self._lock:
            if self._resolved:
                if self._handle is None:
                    raise RuntimeError("ferry: this Future is completed already")
                return
            self._value, self._exc, self._resolved = value, exc, True
            callbacks, self._callbacks = self._callbacks, []
            if self._cond is not None:
                self._cond.notify_all()
        for cb in callbacks:
            try:
                cb(self)
            except Exception:  # one callback's failure must not hide the others'
                import traceback

                traceback.print_exc()
