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
- other __dlpack__ exporters (CuPy, JAX, ...): sent by DLPack; in host
  memory they arrive as numpy arrays.

Device tensors (DLPack kDLCUDA: torch CUDA tensors, CuPy and JAX arrays)
are exported with __dlpack__(stream=1): the producer orders its pending
work before DLPack's legacy default stream, and the payload tells ferry to
read after that stream's work (FERRY_STREAM_LEGACY), so the host never
waits. The producer object is kept alive until ferry frees the tensor. A
non-contiguous one is refused (ferry never copies device memory itself).
The sender records its framework beside the reference; a device tensor
arrives as that framework's tensor on the same device index, through
DLPack (from_device below); see docs/python.md, "Device tensors".

No torn tensors: what arrives is what a host tensor held at the call
(rpc_async, remote) or when the handler returned (a result). ferry's core
copies each host tensor into a pooled buffer before the call returns
(ferry.h, ferry_payload_t.zero_copy) unless the payload marks it zero-copy,
which this module does where no copy is needed: every tensor of an rpc_sync
call (the caller is blocked until the reply, and the callee replies only
after every byte arrived), a tensor copied here anyway (made contiguous or
native-endian), a result nothing else references (sole_reference), and
what the user opted in with zero_copy(x) or rpc_async(..., zero_copy=True).
The marks travel as the tensors list's `zero_copy` bit mask (Tensors).
"""

import io
import pickle
import sys
import threading
import types

import numpy as np

from . import _ferry

PROTOCOL = 5

KDLCUDA = 2  # DLPack's device type code for CUDA memory
LEGACY_STREAM = 1  # DLPack's (and ferry.h's FERRY_STREAM_LEGACY) legacy default stream


def _torch():
    return sys.modules.get("torch")


ZERO_COPY_ALL = (1 << 64) - 1  # ferry.h's FERRY_ZERO_COPY_ALL


class Tensors(list):
    """A payload's tensors and the mask of those sent zero-copy (bit i:
    tensor i; the binding reads it into ferry_payload_t.zero_copy)."""

    zero_copy = 0


class ZeroCopy:
    """ferry.zero_copy(x): x sent from its own memory, no copy. The contract:
    do not write x until the call's future is done (an argument), or at all
    while the reply may still be leaving (a result). The callee receives x
    itself, not this wrapper."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return "ferry.zero_copy(%r)" % (self.value,)


def zero_copy(x):
    """Marks a numpy array or tensor (host memory) to be sent without the
    copy that otherwise gives the callee (or the caller, for a result) the
    bytes x held at the call: the bytes are read from x while they leave,
    so x must not be written until the call's future is done. Device
    tensors are never copied; the mark changes nothing for them."""
    return ZeroCopy(x)


def sole_reference(value, held):
    """True when value is a numpy array that nothing references but the
    `held` references of its caller's frames, and whose memory no other
    array reaches (its base, if any, is an array or owner nothing else
    holds): no later write can reach its bytes, so a result needs no copy.
    Conservative: any other reference, any other kind of owner (and torch
    tensors: torch 1.13 cannot say whether another tensor shares the
    storage) answer False, which only costs a copy."""
    if type(value) is not np.ndarray:
        return False
    # getrefcount counts `value` here and its own argument besides `held`.
    if sys.getrefcount(value) - 2 > held:
        return False
    base = value.base
    while base is not None:
        # Referenced by the array above it, `base` here, and the argument.
        if sys.getrefcount(base) > 3:
            return False
        if type(base) is np.ndarray:
            base = base.base
        elif type(base).__name__ == "PyCapsule":
            return True  # a DLPack owner (a tensor ferry received)
        else:
            return False
    return True


class _Pickler(pickle.Pickler):
    """Pickles a value with its tensors and RRefs set aside.

    reducer_override (not persistent_id) because the C pickler calls it only
    for objects that are not built-in containers or atoms, which keeps a
    call's pickling near plain pickle's cost; and because what it returns is
    memoized like any reduction, the same array twice is sent once and
    arrives as one object twice."""

    def __init__(self, file, rref_type):
        super().__init__(file, protocol=PROTOCOL)
        self.tensors = Tensors()
        self.rrefs = []
        self._rref_type = rref_type

    def reducer_override(self, obj):
        ref = self._export(obj)
        return NotImplemented if ref is None else (_rebuild, ref)

    def _fresh(self):
        """The tensor just added is a copy made here: nothing else can write
        it, so it needs no second copy."""
        self.tensors.zero_copy |= 1 << (len(self.tensors) - 1)

    def _export(self, obj):
        """The reference that replaces obj, or None to pickle it."""
        if type(obj) is ZeroCopy:
            before = len(self.tensors)
            ref = self._export(obj.value)
            if ref is None or ref[0] != "t" or len(self.tensors) != before + 1:
                raise TypeError("ferry.zero_copy() takes a numpy array or a tensor, not %s"
                                % type(obj.value).__name__)
            self._fresh()
            return ref
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
            if _on_cuda(obj):
                self.tensors.append((_export_on_its_device(obj), obj))
            else:
                self.tensors.append(obj.__dlpack__())
            return ("t", len(self.tensors) - 1, framework_of(obj), None)
        return None

    def _add_numpy(self, a):
        meta = None
        copied = False
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
            copied = True
        if a.dtype == np.bool_:
            a = a.view(np.uint8)
            meta = "bool"
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("="))
            copied = True
        try:
            exported = a.__dlpack__()
        except (BufferError, TypeError, RuntimeError):
            exported = a  # read-only: the buffer protocol (tensors.h)
        self.tensors.append(exported)
        if copied:
            self._fresh()
        return ("t", len(self.tensors) - 1, "numpy", meta)

    def _add_torch(self, t, torch):
        meta = []
        if t.requires_grad:
            t = t.detach()
            meta.append("grad")
        cuda = t.device.type == "cuda"
        copied = False
        if not cuda and not t.is_contiguous():
            t = t.contiguous()  # device memory is never copied: refused if not contiguous
            copied = True
        if t.dtype == torch.bool:
            t = t.view(torch.uint8)
            meta.append("bool")
        if cuda:
            # __dlpack__ orders the *current* device's streams: make that
            # the tensor's device.
            with torch.cuda.device(t.device):
                self.tensors.append((_export_device(t), t))
        else:
            self.tensors.append(torch.utils.dlpack.to_dlpack(t))
            if copied:
                self._fresh()
        return ("t", len(self.tensors) - 1, "torch", tuple(meta))


def framework_of(obj):
    """The framework a DLPack exporter belongs to, recorded by the sender
    so that a device tensor arrives as the same kind: "cupy", "jax", or
    "dlpack" (any other)."""
    root = (type(obj).__module__ or "").split(".")[0]
    if root == "cupy":
        return "cupy"
    if root in ("jax", "jaxlib"):
        return "jax"
    return "dlpack"


def _on_cuda(obj):
    device = getattr(obj, "__dlpack_device__", None)
    return device is not None and int(device()[0]) == KDLCUDA


def _export_on_its_device(obj):
    device = getattr(obj, "device", None)
    use = getattr(device, "use", None)  # a CuPy Device is a context manager
    if framework_of(obj) == "cupy" and use is not None:
        with device:
            return _export_device(obj)
    return _export_device(obj)


def _export_device(obj):
    """obj's DLPack capsule, its pending work ordered before the legacy
    default stream (the producer inserts a stream wait; the host does not
    block)."""
    try:
        return obj.__dlpack__(stream=LEGACY_STREAM)
    except TypeError:
        # A producer without the stream argument: DLPack says it then
        # assumes the legacy default stream, which is what ferry reads after.
        return obj.__dlpack__()


# ---- device tensors on arrival --------------------------------------------------

# Frameworks that can hold a received CUDA tensor, in the order tried after
# the sender's own. JAX is tried only when it was the sender's framework or
# this process imported it already: its first use takes most of the GPU's
# memory, not something to do behind a user's back.
DEVICE_FRAMEWORKS = ("torch", "cupy", "jax")
_FALLBACKS = ("torch", "cupy")


def device_framework_order(preferred, loaded=None):
    """The frameworks to try for a device tensor the sender made with
    `preferred`: that one, then those this process imported already, then
    torch and CuPy."""
    loaded = sys.modules if loaded is None else loaded
    order = [preferred] if preferred in DEVICE_FRAMEWORKS else []
    for name in DEVICE_FRAMEWORKS:
        if name in loaded and name not in order:
            order.append(name)
    for name in _FALLBACKS:
        if name not in order:
            order.append(name)
    return order


def _torch_converter():
    import torch

    if not torch.cuda.is_available():
        return None  # a CPU-only torch cannot hold it
    return torch.utils.dlpack.from_dlpack


def _cupy_converter():
    import cupy

    return cupy.from_dlpack


def _jax_converter():
    import jax.dlpack

    def convert(t):
        try:
            return jax.dlpack.from_dlpack(t)
        except TypeError:  # an older JAX takes the capsule only
            if t.exported:
                raise
            return jax.dlpack.from_dlpack(t.__dlpack__())

    return convert


_CONVERTERS = {"torch": _torch_converter, "cupy": _cupy_converter, "jax": _jax_converter}
_converters = {}  # name -> from_dlpack function, or None where unusable here


def _converter(name):
    """The function that makes a `name` array from a DLPack producer, or
    None where that framework is not importable or cannot hold device
    memory here. Decided once per process."""
    try:
        return _converters[name]
    except KeyError:
        pass
    try:
        fn = _CONVERTERS[name]()
    except Exception:  # noqa: BLE001 - not importable (or broken): try the next
        fn = None
    _converters[name] = fn
    return fn


def from_device(t, preferred, converter=None):
    """A received device tensor (a DLPack producer: _ferry.DeviceTensor) as
    the first framework of device_framework_order(preferred) usable here,
    zero-copy on its device; t itself if none is. The framework takes
    ferry's memory as it is (its deleter frees it), never allocating."""
    converter = converter or _converter
    for name in device_framework_order(preferred):
        fn = converter(name)
        if fn is not None:
            return fn(t)
    return t


def _restore(value, meta):
    """What the sender changed to export a torch tensor, undone."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        if "bool" in meta:
            value = value.view(torch.bool)
        if "grad" in meta:
            value.requires_grad_()
    elif "bool" in meta and hasattr(value, "view") and hasattr(value, "dtype"):
        value = value.view(np.bool_)  # a CuPy fallback
    return value


# The message being unpickled on this thread (loads() sets it): _rebuild
# takes its tensors and RRefs out of it.
_receiving = threading.local()


def _rebuild(kind, index, *extra):
    """Unpickling's side of _Pickler._export."""
    message, rref_factory = _receiving.current
    if kind == "r":
        return rref_factory(message.take_rref(index), extra[0])
    kind, meta = extra
    # Host memory: a numpy array, or a capsule for torch; device memory: a
    # DeviceTensor, whatever was asked.
    t = message.take(index, kind != "torch")
    if type(t) is _ferry.DeviceTensor:
        t = from_device(t, kind)
        return _restore(t, meta) if kind == "torch" else t
    if kind == "torch":
        import torch

        return _restore(torch.utils.dlpack.from_dlpack(t), meta)
    return t.view(np.bool_) if meta == "bool" else t


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


def dumps(value, rref_type, zero_copy=False):
    """(pickle bytes, Tensors of DLPack capsules or buffers, [RRef handles]).
    zero_copy: every tensor is sent from its own memory (see the module's
    docstring); else those marked in the value (ZeroCopy) or copied here."""
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
    if zero_copy:
        p.tensors.zero_copy = ZERO_COPY_ALL
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
