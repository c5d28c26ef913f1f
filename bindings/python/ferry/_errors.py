"""ferry's exceptions, one per failure a caller handles differently.

Every exception ferry raises derives from FerryError (a RuntimeError, as
torch.distributed.rpc raises RuntimeError) and carries the C status in
`.code`. Some also derive from the builtin a Python user already catches:
a missed deadline is a TimeoutError, an unknown worker or function a
LookupError, bad input a ValueError.
"""

# Status codes of abi/include/ferry/transport.h, as the extension exports them.
from ._ferry import (OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT,  # noqa: F401
                     DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
                     RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, INTERNAL,
                     UNAVAILABLE, UNAUTHENTICATED, PEER_GONE)


class FerryError(RuntimeError):
    """A ferry call failed; `.code` is the status, the message says why."""

    def __init__(self, message, code=UNKNOWN):
        super().__init__(message)
        self.code = code


class PeerGoneError(FerryError):
    """The worker at the other end died or left before answering, or was
    already leaving when the call reached it (FERRY_PEER_GONE; a worker that
    left says "worker 'w1' left the job")."""


class DeadlineExceededError(FerryError, TimeoutError):
    """The call's timeout passed before it was answered."""


class NotFoundError(FerryError, LookupError):
    """No such worker, or no such function on it."""


class InvalidArgumentError(FerryError, ValueError):
    """Bad input: nothing was sent."""


class CancelledError(FerryError):
    """The worker shut down before the call finished."""


class NotInitializedError(FerryError):
    """A call before init_rpc() or after shutdown()."""

    def __init__(self, message, code=FAILED_PRECONDITION):
        super().__init__(message, code)


class AuthenticationError(FerryError):
    """The job secrets differ: the store or a worker refused this one
    (FERRY_UNAUTHENTICATED). Give every worker of the job the same `secret`
    (or FERRY_SECRET)."""

    def __init__(self, message, code=UNAUTHENTICATED):
        super().__init__(message, code)


class RemoteExitError(FerryError):
    """The remote function raised SystemExit, KeyboardInterrupt or another
    BaseException that is not an Exception. It ended that call only: it is
    never re-raised as itself here (it would end this process). `remote_type`
    names it ("builtins.SystemExit"), `remote_args` holds its args where they
    could be rebuilt (None otherwise), `remote_traceback` the remote
    traceback."""


class ReplyDecodeError(FerryError):
    """The call succeeded but its reply could not be decoded here (typically
    a result of a class only the callee can import). `worker` and
    `function` name the call; the decoding error is the `__cause__`."""


_BY_CODE = {
    PEER_GONE: PeerGoneError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
    NOT_FOUND: NotFoundError,
    INVALID_ARGUMENT: InvalidArgumentError,
    CANCELLED: CancelledError,
    UNAUTHENTICATED: AuthenticationError,
}


def from_status(code, message):
    """The exception for a failed C call (the extension raises these)."""
    exc = remote_exception(message) if code == UNKNOWN else None
    if exc is None:
        exc = _BY_CODE.get(code, FerryError)(message, code)
    exc._ferry_status = (code, message)  # forwarded unchanged if re-raised remotely
    return exc


# A Python handler's exception crosses the wire as a status message (code
# UNKNOWN) that C and C++ callers read as text:
#
#   ferry.remote_exception module:qualname
#   On worker 'w1':
#   Traceback (most recent call last): ...        (the remote traceback)
#   ferry.exception_data {"worker": ..., "type": ..., "message": ...,
#                         "exit": bool, "pickle": base64 or null, "why": ...}
#
# The last line carries the exception itself, pickled, so that the caller
# re-raises it with its own type and args; "why" says why it could not be
# pickled. A caller rebuilds it from the message it got, so a C++ hop that
# forwards the status forwards the exception too.
REMOTE_TAG = "ferry.remote_exception "
_DATA_TAG = "\nferry.exception_data "
# A larger pickled exception is not sent (the type and message still are).
_PICKLE_LIMIT = 1 << 20


def encode_remote_exception(exc, worker_name):
    import base64
    import json
    import pickle
    import traceback

    kind = type(exc)
    text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    try:
        message = str(exc)
    except Exception as e:  # noqa: BLE001 - a broken __str__ still fails the call
        message = "<str() failed: %s: %s>" % (type(e).__name__, e)
    data = {"worker": worker_name, "type": _type_name(kind), "message": message,
            "exit": not isinstance(exc, Exception), "pickle": None, "why": None}
    try:
        blob = pickle.dumps(exc, protocol=4)
    except BaseException as e:  # noqa: B036 - any failure to pickle is reported
        data["why"] = "it could not be pickled on worker %r (%s: %s)" % (
            worker_name, type(e).__name__, e)
    else:
        if len(blob) > _PICKLE_LIMIT:
            data["why"] = "its pickle is %d bytes, over ferry's limit of %d" % (
                len(blob), _PICKLE_LIMIT)
        else:
            data["pickle"] = base64.b64encode(blob).decode("ascii")
    return "%s%s:%s\nOn worker %r:\n%s%s%s" % (
        REMOTE_TAG, kind.__module__, kind.__qualname__, worker_name, text.rstrip("\n"),
        _DATA_TAG, json.dumps(data))


def _type_name(kind):
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else "%s.%s" % (module, kind.__qualname__)


def remote_exception(message):
    """The exception a remote handler raised, rebuilt from its message, or
    None when the message is not one. The original type and args where the
    exception could be pickled there and unpickled here; RemoteExitError for
    a SystemExit or KeyboardInterrupt; else a FerryError naming the type and
    message. The remote traceback is in `remote_traceback` and in a note."""
    if not message.startswith(REMOTE_TAG):
        return None
    import base64
    import json
    import pickle

    head, _, rest = message[len(REMOTE_TAG):].partition("\n")
    text, sep, raw = rest.rpartition(_DATA_TAG)
    data = {}
    if sep:
        try:
            data = json.loads(raw)
        except ValueError:
            data = {}
    if not data:
        text = rest
    module, _, qualname = head.partition(":")
    type_name = data.get("type") or ("%s.%s" % (module, qualname))
    worker = data.get("worker", "?")
    remote_message = data.get("message", "")
    exc, why = None, data.get("why") or "the remote side sent no pickled exception"
    if data.get("pickle"):
        try:
            exc = pickle.loads(base64.b64decode(data["pickle"]))
        except Exception as e:  # noqa: BLE001 - reported in the FerryError
            why = "it could not be unpickled here (%s: %s)" % (type(e).__name__, e)
        else:
            if not isinstance(exc, BaseException):
                exc, why = None, "what arrived is not an exception (%s)" % type(exc).__name__
    if data.get("exit") or (exc is not None and not isinstance(exc, Exception)):
        args = exc.args if exc is not None else None
        shown = "%s(%s)" % (type_name, ", ".join(map(repr, args)) if args is not None
                            else remote_message)
        exc = RemoteExitError(
            "ferry: the function called on worker %r raised %s; it ended that call only "
            "(ferry never re-raises it as itself, it would end this process)"
            % (worker, shown), UNKNOWN)
        exc.remote_type, exc.remote_args = type_name, args
    elif exc is None:
        exc = FerryError("ferry: the function called on worker %r raised %s: %s "
                         "(not rebuilt as itself: %s)" % (worker, type_name, remote_message, why),
                         UNKNOWN)
        exc.remote_type = type_name
    exc.remote_traceback = text
    _add_note(exc, "Remote traceback (ferry):\n" + text)
    return exc


def _add_note(exc, note):
    try:
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:  # before Python 3.11: kept, though traceback does not print it
            exc.__notes__ = list(getattr(exc, "__notes__", ())) + [note]
    except Exception:  # noqa: BLE001 - an exception refusing attributes keeps its args
        pass


def reply_decode_error(worker, function, cause):
    """The error for a reply that arrived but could not be decoded here."""
    exc = ReplyDecodeError(
        "ferry: the call of %s on worker %r succeeded, but its reply failed while decoding "
        "the reply here: %s: %s (the result's classes must be importable on the caller too)"
        % (function, worker, type(cause).__name__, cause), UNKNOWN)
    exc.worker, exc.function = worker, function
    return exc
