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
    """The worker at the other end died or left before answering."""


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


_BY_CODE = {
    PEER_GONE: PeerGoneError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
    NOT_FOUND: NotFoundError,
    INVALID_ARGUMENT: InvalidArgumentError,
    CANCELLED: CancelledError,
}


def from_status(code, message):
    """The exception for a failed C call (the extension raises these)."""
    exc = remote_exception(message) if code == UNKNOWN else None
    if exc is None:
        exc = _BY_CODE.get(code, FerryError)(message, code)
    exc._ferry_status = (code, message)  # forwarded unchanged if re-raised remotely
    return exc


# A Python handler's exception crosses the wire as a status message that
# begins with this tag, then "module:qualname", a newline and the remote
# traceback. The caller re-raises the same type where it can import it.
REMOTE_TAG = "ferry.remote_exception "


def encode_remote_exception(exc, worker_name):
    import traceback

    kind = type(exc)
    text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    return "%s%s:%s\nOn worker %r:\n%s" % (
        REMOTE_TAG, kind.__module__, kind.__qualname__, worker_name, text)


def remote_exception(message):
    """The exception a remote handler raised, rebuilt from its message, or None."""
    if not message.startswith(REMOTE_TAG):
        return None
    head, _, text = message[len(REMOTE_TAG):].partition("\n")
    module, _, qualname = head.partition(":")
    kind = _import_type(module, qualname)
    if kind is not None:
        try:
            exc = kind(text)
            exc.remote_traceback = text
            return exc
        except Exception:  # a type whose constructor wants other arguments
            pass
    exc = FerryError("%s.%s: %s" % (module, qualname, text), UNKNOWN)
    exc.remote_traceback = text
    return exc


def _import_type(module, qualname):
    import importlib

    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return obj
    return None
