"""Calls typed C++ functions (ferry/typed.hpp, `ferry::Define`) from Python.

    import ferry, ferry.typed
    ferry.typed.call("server", "typed_add", 40, 2)                 # 42
    ferry.typed.call("server", "typed_scale", np.ones(4, np.float32), 2.5)

Arguments and the result are msgpack values (Debian's python3-msgpack):
ints, floats, bools, str, bytes, lists, tuples (as lists) and dicts. A
numpy array (or any host DLPack exporter) travels as a tensor segment of
the message, not serialised, and a tensor result comes back as a numpy
array. The payload is the typed marker C1 'F' 'T' '1' followed by the
msgpack value; a tensor is extension type 7 with its index among the
message's tensors (4 bytes, big-endian): docs/api.md, "Typed functions".
"""

import struct

import msgpack

from . import _agent

MARKER = b"\xc1FT1"
TENSOR_EXT = 7


def pack(args):
    """(bytes, tensors): the typed payload of the argument list `args`."""
    tensors = []

    def tensor_ref(obj):
        if hasattr(obj, "__dlpack__"):
            tensors.append(obj)
            return msgpack.ExtType(TENSOR_EXT, struct.pack(">I", len(tensors) - 1))
        raise TypeError("ferry.typed: cannot send a %s (msgpack values and tensors only)"
                        % type(obj).__name__)

    return MARKER + msgpack.packb(list(args), default=tensor_ref, use_bin_type=True), tensors


def unpack(data, tensors):
    """The value of a typed payload `data` whose tensors are `tensors`."""
    data = bytes(data)
    if not data.startswith(MARKER):
        raise ValueError("ferry.typed: not a typed payload (no C1 'F' 'T' '1' marker): "
                         "call typed functions only (ferry::Define)")

    def ext(code, body):
        if code == TENSOR_EXT and len(body) == 4:
            return tensors[struct.unpack(">I", body)[0]]
        return msgpack.ExtType(code, body)

    return msgpack.unpackb(data[len(MARKER):], ext_hook=ext, raw=False,
                           strict_map_key=False)


def call(to, function, *args, timeout=None):
    """Runs typed function `function` on worker `to` with `args` and returns
    its result; its errors raise as any ferry call's (ferry.FerryError and
    its subclasses, by status)."""
    data, tensors = pack(args)
    raw = _agent.rpc_sync(to, function, args=(data, *tensors), timeout=timeout)
    return unpack(raw.data, list(raw.tensors))
