"""The worker this process runs, and the calls it makes and serves.

One worker per process, as in torch.distributed.rpc: init_rpc() starts it,
shutdown() ends it, and the module-level functions use it.

Python calls travel as one ferry function per kind, registered by every
Python worker: CALL (rpc_sync / rpc_async), REMOTE (remote(), whose result
stays on the callee as the RRef's value, held as the live object) and FETCH
(to_here() of such an RRef). Their payload is (function, args, kwargs)
pickled with the tensors beside it (_pickling.py). A function given by
*name* (a str) is a ferry function registered in C, C++ or by
ferry.register(): its payload is raw (bytes and tensors, see Raw).
"""

import atexit
import collections
import io
import json
import os
import threading
import time

from . import _errors, _ferry, _options, _pickling
from ._future import _FOREVER_MS, Future

_RRef = None  # ferry._rref.RRef, bound at the end of ferry/__init__.py


def _bind(rref_type):
    global _RRef
    _RRef = rref_type


CALL = "ferry.py.call"
REMOTE = "ferry.py.remote"
FETCH = "ferry.py.fetch"

Raw = collections.namedtuple("Raw", "data tensors rrefs", defaults=((), ()))
Raw.__doc__ = """A raw payload, for functions registered by name in C or C++:
`data` is bytes, `tensors` numpy arrays, `rrefs` RRefs."""


class WorkerInfo:
    """A worker's name and id (torch.distributed.rpc.WorkerInfo), plus
    `transport`: the plugin that reaches it from here. In a static job `id`
    is the worker's rank, as torch's; in an elastic job it is the member id
    the store gave it. Equal when name and id are; hashable."""

    __slots__ = ("name", "id", "transport", "incarnation", "_target")

    def __init__(self, name, id, transport="", incarnation=0, _target=None):  # noqa: A002
        self.name, self.id = name, id
        self.transport, self.incarnation = transport, incarnation
        self._target = _target or name  # what the C API addresses it by

    def __eq__(self, other):
        return isinstance(other, WorkerInfo) and (self.name, self.id) == (other.name, other.id)

    def __hash__(self):
        return hash((self.name, self.id))

    def __repr__(self):
        return "WorkerInfo(id=%d, name=%s)" % (self.id, self.name)


_lock = threading.Lock()
_worker = None
_listeners = []  # fn(WorkerInfo, event) with event "joined" | "left" | "gone"
_EVENTS = {_ferry.MEMBER_ALIVE: "joined", _ferry.MEMBER_LEFT: "left", _ferry.MEMBER_GONE: "gone"}


def current():
    w = _worker
    if w is None:
        raise _errors.NotInitializedError(
            "ferry: no worker in this process: call ferry.init_rpc(name, ...) first "
            "(or again, after shutdown())")
    return w


def timeout_ms(timeout):
    """Seconds (None: the worker's default, 0: no limit) to the C API's ms."""
    if timeout is None or timeout == -1:
        return 0
    if timeout == 0:
        return _FOREVER_MS - 1
    if timeout < 0:
        raise ValueError("ferry: timeout must be positive seconds, 0 (no limit) or None (default)")
    return max(1, min(int(timeout * 1000 + 0.999), _FOREVER_MS - 1))


# ---- life cycle ---------------------------------------------------------------

def init_rpc(name, backend=None, rank=-1, world_size=None, rpc_backend_options=None, *,
             store=None, job=None, host_store=None, timeout=None, peer_timeout=None,
             join_timeout=None, start_timeout=None, secret=None, busy_poll=None,
             executor_threads=None, limits=None):
    """Starts this process's worker and joins the job; see docs/python.md.

    torch's arguments: `backend` (a BackendType, torch's or ferry's, or a
    ferry plugin name), `rank` and `world_size` (a **static** job: this
    returns once all `world_size` workers joined, `WorkerInfo.id` is the
    rank, shutdown() is a job-wide barrier; without them, RANK and
    WORLD_SIZE as torchrun sets them), `rpc_backend_options` (rpc_timeout,
    num_worker_threads, init_method: "env://" = MASTER_ADDR:MASTER_PORT, or
    "tcp://host:port"; ferry's or torch's object). Rank 0 hosts the
    rendezvous store there, as torch's TCPStore. Without a world size (or
    with world_size=0) the job is **elastic**: nobody waits for anybody.

    ferry's own (keyword only): `store` ("host:port", overrides
    init_method), `host_store`, `timeout` (per-call default, seconds),
    `peer_timeout`, `join_timeout` (reaching the store), `start_timeout`
    (a static job's wait for every rank; 300 s), `secret`, `busy_poll`,
    `executor_threads`, `job`, `limits` (a dict of the resource limits to
    set, by name: max_message_size, max_calls_in_flight_per_peer,
    max_queued_bytes_per_connection, max_queued_calls, max_connections,
    handshake_timeout_ms; the others keep their FERRY_* environment value
    or default; docs/limits.md)."""
    global _worker, _static, _self_names
    rpc_timeout, threads, init_method = _options.read(rpc_backend_options)
    rdv = _options.rendezvous(init_method, store, rank, world_size)
    rank, world_size = rdv.rank, rdv.world_size
    if world_size and not 0 <= rank < world_size:
        raise ValueError(
            "ferry: a static job (world_size=%d) needs this worker's rank in [0, %d): pass "
            "rank=, or set RANK as torchrun does (got %d)" % (world_size, world_size, rank))
    with _lock:
        if _worker is not None:
            raise RuntimeError("ferry: init_rpc() was called already in this process "
                               "(as %r); call shutdown() first" % _worker.name())
        o = _ferry.WorkerOptions()
        o.name = name
        o.job = job or ""
        o.transport = (_options.transport(backend, rpc_backend_options)
                       or os.environ.get("FERRY_TRANSPORT", "auto"))
        o.store = rdv.store
        o.host_store = bool(host_store) if host_store is not None else rank == 0
        o.secret = secret or ""
        o.busy_poll = _options.busy_poll(busy_poll)
        o.default_timeout_ms = timeout_ms(timeout if timeout is not None else rpc_timeout)
        if peer_timeout is not None:
            o.peer_timeout_ms = timeout_ms(peer_timeout)
        if join_timeout is not None:
            o.join_timeout_ms = timeout_ms(join_timeout)
        if start_timeout is not None:
            o.start_timeout_ms = timeout_ms(start_timeout)
        o.executor_threads = executor_threads or threads or 0
        _set_limits(o, limits)
        # Python resolved the job's kind itself: the C layer must not read
        # the environment again.
        if world_size:
            o.world_size, o.rank = world_size, rank
        else:
            o.elastic = True
        w = _ferry.Worker(o)  # a static job's start waits for every rank
        try:
            w.register(CALL, _serve_call, True)
            w.register(REMOTE, _serve_remote, True)
            w.register(FETCH, _serve_fetch, True)
            w.on_membership(_on_membership)
        except BaseException:
            w.destroy()
            raise
        _worker = w
        _static = world_size or None
        _self_names = (w.name(), w.rank() if _static else w.id(), "#%d" % w.id())


_static = None  # this worker's world size in a static job, else None

# The resource limits init_rpc(limits=...) sets (ferry_limits_t's fields).
LIMITS = ("max_message_size", "max_calls_in_flight_per_peer",
          "max_queued_bytes_per_connection", "max_queued_calls", "max_connections",
          "handshake_timeout_ms")


def _set_limits(options, limits):
    for key, value in (limits or {}).items():
        if key not in LIMITS:
            raise ValueError("ferry: init_rpc(limits=...) has no limit %r; the limits are %s "
                             "(docs/limits.md)" % (key, ", ".join(LIMITS)))
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError("ferry: limits[%r] must be a positive whole number (got %r)"
                             % (key, value))
        setattr(options, key, value)


def shutdown(graceful=True, timeout=None):
    """Leaves the job; idempotent.

    In a static job (init_rpc with a world size), graceful=True is torch's
    job-wide barrier: it returns once every worker reached shutdown() and
    all outstanding work (calls, RRef deletions) is done, serving calls
    meanwhile; no limit by default, as torch. With `timeout` (seconds) it
    raises DeadlineExceededError naming the workers that did not arrive in
    time; PeerGoneError at once when one left or died without arriving.
    In an elastic job it answers the calls this worker is running (at most
    `timeout` seconds, 30 by default) and fails its own pending ones; it
    never waits for other workers. graceful=False leaves at once, in any
    job. The worker has left when this returns or raises."""
    global _worker, _self_names, _static
    w, static = _worker, _static
    if w is None:
        return
    try:
        if graceful:
            # The worker stays current() meanwhile: a static job's barrier
            # serves calls, whose handlers may call out.
            if timeout is None:
                ms = _FOREVER_MS if static else timeout_ms(30.0)
            elif timeout == 0:
                ms = _FOREVER_MS
            else:
                ms = timeout_ms(timeout)
            w.shutdown(ms, True)
    finally:
        with _lock:
            mine = _worker is w
            if mine:
                _worker, _static, _self_names = None, None, ()
        if mine:
            w.destroy()


@atexit.register
def _at_exit():
    shutdown(graceful=False)
    _ferry.stop_dispatcher()


# ---- membership ---------------------------------------------------------------

def _info(member):
    state, id_, incarnation, name, transport, rank = member
    return WorkerInfo(name, rank if rank >= 0 else id_, transport, incarnation, "#%d" % id_)


def workers():
    """The live workers of the job, this one included."""
    return [_info(m) for m in current().members() if m[0] == _ferry.MEMBER_ALIVE]


def get_worker_info(worker_name=None):
    """This worker's WorkerInfo (no argument), or that of the worker named
    so: a live one, else (a static job's worker that left already) the
    last one known by that name."""
    w = current()
    if worker_name is None:
        worker_name = w.name()
    known = [m for m in w.members() if m[3] == worker_name]
    for m in known:
        if m[0] == _ferry.MEMBER_ALIVE:
            return _info(m)
    if known and _static is not None:
        return _info(known[-1])
    raise _errors.NotFoundError(
        "ferry: no live worker named %r; live: %s" % (worker_name, [i.name for i in workers()]),
        _errors.NOT_FOUND)


def worker_info_by_id(worker_id):
    """The WorkerInfo of a member id (the C API's, as RRefs carry it)."""
    for m in current().members():
        if m[1] == worker_id:
            return _info(m)
    return WorkerInfo("#%d" % worker_id, worker_id)


def store_address():
    """The "host:port" of the rendezvous store this worker hosts or joined
    (with store="host:0" and host_store=True, the port the system chose):
    what workers started later pass as `store`."""
    return current().store_address()


def wait_for_workers(n, timeout=60.0):
    """Waits until at least n workers (this one included) are alive."""
    current().wait_for_workers(n, timeout_ms(timeout))


def on_membership(callback):
    """callback(WorkerInfo, event), event "joined", "left" (gracefully) or
    "gone" (died or unreachable), on ferry's callback thread."""
    _listeners.append(callback)


def on_join(callback):
    on_membership(lambda info, event: event == "joined" and callback(info))


def on_leave(callback):
    on_membership(lambda info, event: event != "joined" and callback(info))


def _on_membership(state, id_, incarnation, name, transport, rank):
    info = _info((state, id_, incarnation, name, transport, rank))
    for cb in list(_listeners):
        cb(info, _EVENTS.get(state, "unknown"))


# ---- calls --------------------------------------------------------------------

def _target(to):
    """What the C API addresses: a name, or "#id". An int is a WorkerInfo id:
    the rank in a static job (member id rank + 1), else the member id."""
    if isinstance(to, WorkerInfo):
        return to._target
    if isinstance(to, int):
        return "#%d" % (to + 1 if _static is not None else to)
    if isinstance(to, str):
        return to
    raise TypeError("ferry: `to` is a worker name, id or WorkerInfo, not %s" % type(to).__name__)


def _encode(func, args, kwargs, zero_copy=False):
    """zero_copy: send every tensor from its own memory (rpc_sync, whose
    caller waits for the reply; or asked for); else ferry sends what each
    held at the call (_pickling.py, "No torn tensors")."""
    if isinstance(func, str):
        return _encode_raw(args, zero_copy)
    if not callable(func):
        raise TypeError("ferry: func must be a callable or a registered function's name")
    return _pickling.dumps((func, tuple(args or ()), kwargs or {}), _RRef, zero_copy)


def _encode_raw(parts, zero_copy=False):
    """A raw payload from (bytes?, tensors..., RRefs...)."""
    RRef = _RRef
    data, tensors, rrefs = b"", _pickling.Tensors(), []
    for i, part in enumerate(parts):
        if isinstance(part, (bytes, bytearray, memoryview)):
            if data:
                raise ValueError("ferry: a raw payload has one bytes part; part %d is a second" % i)
            data = bytes(part)
        elif isinstance(part, RRef):
            rrefs.append(part._handle())
        else:
            # One tensor, exported as a pickled call would export it.
            p = _pickling._Pickler(io.BytesIO(), RRef)
            if p._export(part) is None:
                raise TypeError("ferry: part %d of a raw payload (%s) is not bytes, a tensor "
                                "or an RRef" % (i, type(part).__name__))
            tensors.zero_copy |= p.tensors.zero_copy << len(tensors)
            tensors.extend(p.tensors)
    if zero_copy:
        tensors.zero_copy = _pickling.ZERO_COPY_ALL
    return data, tensors, rrefs


def _make_rref(handle, py):
    return _RRef(_handle=handle, _py=py)


def _decode(message):
    return _pickling.loads(message, _make_rref)


def _reply_decoder(to, func):
    """_decode for the reply of a call of `func` (a callable, or a text) to
    `to`, whose failure says which call's reply it was (a result of a class
    only the callee imports). Names are worked out only on failure."""

    def decode(message):
        try:
            return _pickling.loads(message, _make_rref)
        except Exception as e:  # noqa: BLE001 - re-raised with the call named
            raise _errors.reply_decode_error(_worker_name(to), _function_name(func),
                                             e) from e

    return decode


def _worker_name(to):
    """The name of the worker `to` addresses, for messages (best effort)."""
    if isinstance(to, WorkerInfo):
        return to.name
    target = _target(to) if isinstance(to, (int, str)) else str(to)
    w = _worker
    if target.startswith("#") and w is not None:
        for m in w.members():
            if "#%d" % m[1] == target:
                return m[3]
    return target


def _function_name(func):
    if isinstance(func, str):
        return func
    name = getattr(func, "__qualname__", None) or repr(func)
    module = getattr(func, "__module__", None)
    return "%s.%s" % (module, name) if module else name


def _raw_tensor(message, i):
    t = message.take(i, True)  # a numpy array, or a DeviceTensor
    return t if type(t) is not _ferry.DeviceTensor else _pickling.from_device(t, "dlpack")


def decode_raw(message):
    tensors = [_raw_tensor(message, i) for i in range(message.num_tensors())]
    rrefs = [_RRef(_handle=message.take_rref(i), _py=False) for i in range(message.num_rrefs())]
    return Raw(message.data(), tensors, rrefs)


_self_names = ()  # this worker's name, id and "#id": set by init_rpc


def _is_self(to):
    if isinstance(to, WorkerInfo):
        to = to._target
    return to in _self_names


def _run_here(func, args, kwargs):
    """remote() to this worker itself: an RRef is owned by its creator, so
    the function runs here (rpc_sync / rpc_async to this worker go through
    the core, which runs them on a handler thread under their deadline)."""
    if isinstance(func, str):
        raise _errors.InvalidArgumentError(
            "ferry: calling %r on this worker itself by name: call the function directly"
            % func, _errors.INVALID_ARGUMENT)
    result = func(*(args or ()), **(kwargs or {}))
    if getattr(func, "_ferry_async_execution", False):
        result = result.wait()  # ferry's or torch's Future
    return result


def _start(to, func, args, kwargs, timeout, zero_copy=False):
    data, tensors, rrefs = _encode(func, args, kwargs, zero_copy)
    name = func if isinstance(func, str) else CALL
    handle = current().rpc_async(_target(to), name, data, tensors, rrefs, timeout_ms(timeout))
    return handle, (decode_raw if isinstance(func, str)
                    else _reply_decoder(to, func))


def _result(handle, decode):
    """Waits for a call (its own deadline ends it) and returns its value."""
    handle.wait(_FOREVER_MS)
    code, message = handle.status()
    if code != _errors.OK:
        raise _errors.from_status(code, message)
    return decode(handle.take())


def rpc_sync(to, func, args=(), kwargs=None, timeout=None):
    """Runs func(*args, **kwargs) on `to` and returns its result. On this
    worker itself too: on a handler thread, under the same deadline."""
    # No copy: this thread waits for the reply, and the callee replies only
    # after every byte of the arguments arrived. Except to this worker
    # itself: there the handler would get this very memory (no wire
    # between), and could keep it past the call.
    return _result(*_start(to, func, args, kwargs, timeout, zero_copy=not _is_self(to)))


def fetch(owner, rref, timeout):
    """A copy of the live object a Python-held RRef refers to, pickled by
    its owner as it is now (FETCH)."""
    handle = current().rpc_async(_target(owner), FETCH, b"", [], [rref._handle()],
                                 timeout_ms(timeout))
    return _result(handle, _reply_decoder(owner, "to_here() of an RRef"))


def rpc_async(to, func, args=(), kwargs=None, timeout=None, zero_copy=False):
    """Runs func(*args, **kwargs) on `to`; returns a Future of its result.
    The callee gets the bytes the tensors in args held now (ferry copies
    them, into a pooled buffer); zero_copy=True sends them from their own
    memory instead: then do not write them until the future is done (per
    tensor: ferry.zero_copy(x))."""
    handle, decode = _start(to, func, args, kwargs, timeout, zero_copy)
    return Future(handle, decode)


def remote(to, func, args=(), kwargs=None, timeout=None, zero_copy=False):
    """Runs func(*args, **kwargs) on `to`, keeps the result there, and
    returns an RRef to it at once. The timeout bounds the call; a failure
    surfaces in to_here(). zero_copy as for rpc_async."""
    if _is_self(to):
        return _RRef(_run_here(func, args, kwargs))
    data, tensors, rrefs = _encode(func, args, kwargs, zero_copy)
    raw = isinstance(func, str)
    handle = current().remote(_target(to), func if raw else REMOTE, data, tensors, rrefs,
                              timeout_ms(timeout))
    return _RRef(_handle=handle, _py=not raw)


# ---- serving ------------------------------------------------------------------

class CurrentCall:
    """The call a handler is serving (ferry.current_call()): `function` (the
    function's qualified name, or the name a raw function was called by),
    `caller` (a WorkerInfo), `deadline` (the caller's deadline on
    time.monotonic()'s clock, None when it set none), `remaining` (seconds
    left of it, 0.0 once passed, None when none) and `cancelled` (True once
    the caller gave up: it cancelled the future, its deadline passed, or it
    died or left; the result will not be read, so a handler may stop early).
    A call the handler makes with no timeout of its own gets `remaining`."""

    __slots__ = ("_call", "function", "deadline")

    def __init__(self, call, function):
        self._call, self.function = call, function
        ms = call.remaining_ms
        self.deadline = None if ms == _FOREVER_MS else time.monotonic() + ms / 1000.0

    @property
    def remaining(self):
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    @property
    def cancelled(self):
        return self._call.cancelled()

    @property
    def caller(self):
        name = self._call.caller_name
        try:
            return get_worker_info(name)
        except Exception:  # noqa: BLE001 - a caller that left meanwhile
            return WorkerInfo(name, self._call.caller_id)

    def __repr__(self):
        return "CurrentCall(function=%r, caller=%r, remaining=%r, cancelled=%r)" % (
            self.function, self._call.caller_name, self.remaining, self.cancelled)


_serving = threading.local()


def current_call():
    """The call this thread's handler is serving (a CurrentCall), or None
    outside a handler. An async_execution function's continuations run
    outside it: read what they need before returning the Future."""
    return getattr(_serving, "call", None)


def _fail(call, exc):
    status = getattr(exc, "_ferry_status", None)
    if status is not None:  # a ferry failure passing through: keep it as it is
        call.fail(*status)
        return
    w = _worker
    name = w.name() if w is not None else "?"
    call.fail(_errors.UNKNOWN, _errors.encode_remote_exception(exc, name))


def _reply_value(call, value):
    try:
        # A result nothing else references cannot be written after this:
        # no copy (the 2 references: _run's `result` and `value` here; any
        # other path, an async_execution Future's or an RRef's value, holds
        # more and is copied). Its own statement: an argument list being
        # built holds references too.
        sole = _pickling.sole_reference(value, 2)
        data, tensors, rrefs = _pickling.dumps(value, _RRef, sole)
    except BaseException as e:  # noqa: B036 - answered, not swallowed
        _fail(call, e)
        return
    try:
        call.reply(data, tensors, rrefs)
    except (TypeError, ValueError) as e:
        # A tensor ferry cannot send (a non-contiguous device tensor): the
        # reply was refused before the call was answered, so answer it.
        if not call.pending():
            raise
        _fail(call, e)


# The bytes of a Python-held RRef value (module.cc: RRefLocalValue).
HELD = b"FPYH"


def _reply_held(call, value):
    call.reply(HELD, [_ferry.holder_tensor(value)], [])


def _run(call, message, reply):
    try:
        func, args, kwargs = _decode(message)
        _serving.call = CurrentCall(call, getattr(func, "__qualname__", repr(func)))
        try:
            result = func(*args, **kwargs)
        finally:
            _serving.call = None
    except BaseException as e:  # noqa: B036
        _fail(call, e)
        return
    args = kwargs = None  # the result's only references are ours (_reply_value)
    if not getattr(func, "_ferry_async_execution", False):
        reply(call, result)
        return
    if not hasattr(result, "add_done_callback"):
        _fail(call, TypeError("ferry: %s is an async_execution function and must return a "
                              "Future, not %s" % (func.__qualname__, type(result).__name__)))
        return

    def answer(fut):
        try:
            value = fut.value()
        except BaseException as e:  # noqa: B036
            _fail(call, e)
            return
        reply(call, value)

    result.add_done_callback(answer)


def _serve_call(call, message):
    _run(call, message, _reply_value)


def _serve_remote(call, message):
    _run(call, message, _reply_held)


def _serve_fetch(call, message):
    try:
        rref = _RRef(_handle=message.take_rref(0), _py=True)
        value = rref.local_value(timeout=0)  # the caller's deadline bounds it
    except BaseException as e:  # noqa: B036
        _fail(call, e)
        return
    _reply_value(call, value)


# ---- functions by name (C and C++ interop) -----------------------------------

def register(name, func):
    """Registers func under `name`, callable by name from any language:
    func(data: bytes, tensors: list of numpy arrays) returns bytes, a list
    of tensors, (bytes, tensors), a Raw, or None."""

    def serve(call, message):
        try:
            args = decode_raw(message)
            _serving.call = CurrentCall(call, name)
            try:
                result = func(args.data, list(args.tensors))
            finally:
                _serving.call = None
            data, tensors, rrefs = _encode_raw(_raw_parts(result))
        except BaseException as e:  # noqa: B036
            _fail(call, e)
            return
        call.reply(data, tensors, rrefs)

    current().register(name, serve, True)


def _raw_parts(result):
    if result is None:
        return ()
    if isinstance(result, (bytes, bytearray, memoryview)):
        return (result,)
    if isinstance(result, Raw):
        return (result.data, *result.tensors, *result.rrefs)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], (list, tuple)):
        return (result[0], *result[1])
    if isinstance(result, list):
        return tuple(result)
    return (result,)


def is_available():
    """torch.distributed.rpc.is_available(): ferry's RPC always is."""
    return True


def stats():
    """Counters of this worker (RRefs, pending calls, refused connections)."""
    return current().stats()


def debug_dump(as_text=False):
    """What this worker is doing, for finding out why a job hangs
    (docs/debugging.md): a dict (the JSON text with as_text=True) with the
    calls it waits for and serves, its RRefs, peers, transports, a static
    job's barrier, and "blocked_on": what it waits for, in words. Calls of
    Python functions show as function "ferry.py.call" (their name travels
    pickled). The same dump goes to stderr on SIGUSR1 (FERRY_DEBUG_SIGNAL)
    and to the log when shutdown() or wait_for_workers() times out."""
    text = current().debug_dump()
    return text if as_text else json.loads(text)
