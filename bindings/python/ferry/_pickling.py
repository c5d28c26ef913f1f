"""How Python values travel: pickle for the structure, DLPack for tensors.

A numpy array or torch tensor anywhere in a value (an argument, a result,
nested in lists, dicts, state dicts, objects) is not pickled: the pickler
replaces it with a reference (pickle's persistent ids), and the tensor goes
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

import numpy as np

PROTOCOL = 5


def _torch():
    return sys.modules.get("torch")


class _Pickler(pickle.Pickler):
    def __init__(self, file, rref_type):
        super().__init__(file, protocol=PROTOCOL)
        self.tensors = []
        self.rrefs = []
        self._rref_type = rref_type
        self._seen = {}  # id(obj) -> persistent id: aliasing survives

    def persistent_id(self, obj):
        if isinstance(obj, (str, bytes, int, float, tuple, list, dict)):
            return None  # the common case, quickly
        seen = self._seen.get(id(obj))
        if seen is not None:
            return seen[0]
        pid = self._export(obj)
        if pid is not None:
            self._seen[id(obj)] = (pid, obj)  # obj kept alive: ids stay unique
        return pid

    def _export(self, obj):
        torch = _torch()
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject or obj.dtype.names is not None:
                return None  # object and structured arrays go by pickle
            return self._add_numpy(obj)
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


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, message, rref_factory):
        super().__init__(file)
        self._message = message
        self._rref_factory = rref_factory
        self._loaded = {}

    def persistent_load(self, pid):
        loaded = self._loaded.get(pid)
        if loaded is None:
            loaded = self._load(pid)
            self._loaded[pid] = loaded
        return loaded

    def _load(self, pid):
        if pid[0] == "r":
            return self._rref_factory(self._message.take_rref(pid[1]), pid[2])
        _, index, kind, meta = pid
        if kind == "torch":
            import torch

            t = torch.utils.dlpack.from_dlpack(self._message.take_capsule(index))
            if "bool" in meta:
                t = t.view(torch.bool)
            if "grad" in meta:
                t.requires_grad_()
            return t
        if kind == "dlpack":
            try:
                return self._message.take_numpy(index)
            except TypeError:  # device memory: torch can hold it
                import torch

                return torch.utils.dlpack.from_dlpack(self._message.take_capsule(index))
        a = self._message.take_numpy(index)
        return a.view(np.bool_) if meta == "bool" else a


def dumps(value, rref_type):
    """(pickle bytes, [DLPack capsules or buffers], [RRef handles])."""
    buf = io.BytesIO()
    p = _Pickler(buf, rref_type)
    try:
        p.dump(value)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise TypeError(
            "ferry: cannot send %s: %s. Functions must be defined at module "
            "level (they go by reference, as with torch.distributed.rpc), and "
            "every argument must be picklable." % (_describe(value), e)) from e
    return buf.getvalue(), p.tensors, p.rrefs


def loads(message, rref_factory):
    """The value a message carries (its tensors and RRefs taken from it)."""
    return _Unpickler(io.BytesIO(message.data()), message, rref_factory).load()


def _describe(value):
    if isinstance(value, tuple) and len(value) == 3 and callable(value[0]):
        return "a call to %s" % getattr(value[0], "__qualname__", value[0])
    return "a value of type %s" % type(value).__name__
