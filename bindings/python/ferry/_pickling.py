"""How Python values travel: pickle for the structure, DLPack for tensors.

A numpy array or torch tensor anywhere in a value (an argument, a result,
nested in lists, dicts, state dicts, objects) is not pickled: the pickler
replaces it with a reference (a reduction to _rebuild), and the tensor goes
beside the pickle as a DLPack tensor segment, its bytes never copied on the
send side. The receiver gets the same kind back: numpy stays numpy (a
writable array over the received bytes), torch stays torch. An RRef goes the
same way, as an RRef segment ferry's fork protocol counts.

Fallbacks, where a framework refuses DLPack (all zero-copy unless noted):
- numpy read-only arrays (numpy 1.24 refuses to export them): sent through
  the buffer protocol instead; they arrive writable.
- bool arrays and tensors (DLPack 0.6 has no bool): sent as uint8, viewed as
  bool again on arrival.
- torch tensors that require grad (torch 1.13 refuses): sent detached; they
  arrive with requires_grad set again (autograd history does not cross).
- non-contiguous input: made contiguous first (this one copies).
- other __dlpack__ exporters (CuPy, JAX, ...): sent by DLPack, arrive as
  numpy arrays (host memory) or torch tensors (device memory).
"""

import io
import pickle
import sys
import threading
import types

import numpy as np

PROTOCOL = 5


def _torch():
    return sys.modules.get("torch")


class _Pickler(pickle.Pickler):
    """Pickles a value with its tensors and RRefs set aside.

    reducer_override (not persistent_id) because the C pickler calls it only
    for objects that are not built-in containers or atoms, which keeps a
    call's pickling near plain pickle's cost; and because what it returns is
    memoized like any reduction, the same array twice is sent once and
    arrives as one object twice."""

    def __init__(self, file, rref_type):
        super().__init__(file, protocol=PROTOCOL)
        self.tensors = []
        self.rrefs = []
        self._rref_type = rref_type

    def reducer_override(self, obj):
        ref = self._export(obj)
        return NotImplemented if ref is None else (_rebuild, ref)

    def _export(self, obj):
        """The reference that replaces obj, or None to pickle it."""
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject or obj.dtype.names is not None:
                return None  # object and structured arrays go by pickle
            return self._add_numpy(obj)
        torch = _torch()
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._add_torch(obj, torch)
        if isinstance(obj, self._rref_type):
            self.rrefs.append(obj._handle())
            return ("r", len(self.rrefs) - 1, obj._py)
        if hasattr(obj, "__dlpack__") and not isinstance(obj, type):
            self.tensors.append(obj.__dlpack__())
            return ("t", len(self.tensors) - 1, "dlpack", None)
        return None

    def _add_numpy(self, a):
        meta = None
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        if a.dtype == np.bool_:
            a = a.view(np.uint8)
            meta = "bool"
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("="))
        try:
            exported = a.__dlpack__()
        except (BufferError, TypeError, RuntimeError):
            exported = a  # read-only: the buffer protocol (tensors.h)
        self.tensors.append(exported)
        return ("t", len(self.tensors) - 1, "numpy", meta)

    def _add_torch(self, t, torch):
        meta = []
        if t.requires_grad:
            t = t.detach()
            meta.append("grad")
        if not t.is_contiguous():
            t = t.contiguous()
        if t.dtype == torch.bool:
            t = t.view(torch.uint8)
            meta.append("bool")
        self.tensors.append(torch.utils.dlpack.to_dlpack(t))
        return ("t", len(self.tensors) - 1, "torch", tuple(meta))


# The message being unpickled on this thread (loads() sets it): _rebuild
# takes its tensors and RRefs out of it.
_receiving = threading.local()


def _rebuild(kind, index, *extra):
    """Unpickling's side of _Pickler._export."""
    message, rref_factory = _receiving.current
    if kind == "r":
        return rref_factory(message.take_rref(index), extra[0])
    kind, meta = extra
    if kind == "torch":
        import torch

        t = torch.utils.dlpack.from_dlpack(message.take_capsule(index))
        if "bool" in meta:
            t = t.view(torch.bool)
        if "grad" in meta:
            t.requires_grad_()
        return t
    if kind == "dlpack":
        try:
            return message.take_numpy(index)
        except TypeError:  # device memory: torch can hold it
            import torch

            return torch.utils.dlpack.from_dlpack(message.take_capsule(index))
    a = message.take_numpy(index)
    return a.view(np.bool_) if meta == "bool" else a


# Values that can hold no tensor and no RRef: pickled by plain pickle.
_ATOMS = frozenset((type(None), bool, int, float, complex, str, bytes, types.FunctionType,
                    types.BuiltinFunctionType))


def _plain(value, depth=2):
    """True when value is an atom, or a tuple, list or dict of them (nested
    at most `depth` deep): it pickles the same with or without _Pickler, and
    plain pickle.dumps saves building a _Pickler (and the exceptions its
    constructor raises and catches), a third of a no-op call's pickling."""
    t = type(value)
    if t in _ATOMS:
        return True
    if depth == 0:
        return False
    if t is tuple or t is list:
        for v in value:
            if not _plain(v, depth - 1):
                return False
        return True
    if t is dict:
        for k, v in value.items():
            if type(k) not in _ATOMS or not _plain(v, depth - 1):
                return False
        return True
    return False


def dumps(value, rref_type):
    """(pickle bytes, [DLPack capsules or buffers], [RRef handles])."""
    try:
        if _plain(value):
            return pickle.dumps(value, PROTOCOL), [], []
        buf = io.BytesIO()
        p = _Pickler(buf, rref_type)
        p.dump(value)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise TypeError(
            "ferry: cannot send %s: %s. Functions must be defined at module "
            "level (they go by reference, as with torch.distributed.rpc), and "
            "every argument must be picklable." % (_describe(value), e)) from e
    return buf.getvalue(), p.tensors, p.rrefs


def loads(message, rref_factory):
    """The value a message carries (its tensors and RRefs taken from it)."""
    outer = getattr(_receiving, "current", None)  # loads() inside an unpickling
    _receiving.current = (message, rref_factory)
    try:
        return pickle.loads(message.data())
    finally:
        _receiving.current = outer


def _describe(value):
    if isinstance(value, tuple) and len(value) == 3 and callable(value[0]):
        return "a call to %s" % getattr(value[0], "__qualname__", value[0])
    return "a value of type %s" % type(value).__name__
