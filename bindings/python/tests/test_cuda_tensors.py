"""Device tensors (DLPack kDLCUDA) end to end: a torch CUDA tensor or a CuPy
array passed to rpc_sync lands in the callee's GPU memory and comes back as
the caller's framework's tensor on the same device index.

The GPU tests need a CUDA device and are skipped, saying so, without one
(torch.cuda unavailable: no GPU, or a CPU-only torch; CuPy not installed or
no device). What needs no GPU runs everywhere: a fake DLPack producer that
claims CUDA memory (it cannot exist on a machine without a GPU, so it is
faked, with ctypes) is refused when not contiguous, the sender records the
framework, the received-tensor object follows the DLPack protocol, and the
receiver picks the framework.

Run: PYTHONPATH=<dir holding the ferry package> python3 -m pytest
bindings/python/tests/test_cuda_tensors.py (FERRY_PLUGIN_PATH where the
plugins are not beside libferry). The GPU tests run twice: backend "auto"
(cuda_ipc between processes of one host) and "staged": "tcp,cuda_ipc" with
each process told it is on a host of its own (FERRY_CUDA_IPC_DOMAIN_OVERRIDE),
so cuda_ipc does not reach the peer and the core stages device tensors
through host memory over tcp, as between two machines; they must still land
in the callee's GPU memory. FERRY_TEST_BACKEND picks one.
"""

import ctypes
import gc
import os
import sys

import pytest

import ferry
from ferry import _ferry, _pickling

import remote_fns as fns
from conftest import Cluster

BACKENDS = [os.environ["FERRY_TEST_BACKEND"]] if os.environ.get("FERRY_TEST_BACKEND") \
    else ["auto", "staged"]
SIZES = {"4KiB": 4 << 10, "64MiB": 64 << 20}
_DOMAIN = "FERRY_CUDA_IPC_DOMAIN_OVERRIDE"


@pytest.fixture(scope="module", params=BACKENDS)
def devcluster(request):
    if request.param != "staged":
        c = Cluster(backend=request.param)
        c.start("w1")
        yield c
        c.close()
        return
    # Two "hosts": cuda_ipc is loaded (the core stages with its mem_copy)
    # but reaches no peer.
    saved = os.environ.get(_DOMAIN)
    os.environ[_DOMAIN] = "ferry-test-host-a"
    try:
        try:
            c = Cluster(backend="tcp,cuda_ipc")
        except ferry.FerryError as e:
            if _gpu_seen():
                raise
            pytest.skip("no GPU here: cuda_ipc does not start (%s)" % e)
        c.start("w1", env={_DOMAIN: "ferry-test-host-b"})
        yield c
        c.close()
    finally:
        if saved is None:
            os.environ.pop(_DOMAIN, None)
        else:
            os.environ[_DOMAIN] = saved


def _gpu_seen():
    """True when torch or CuPy sees a CUDA device."""
    try:
        import torch

        if torch.cuda.is_available():
            return True
    except ImportError:
        pass
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, or CuPy's own CUDA errors
        return False


# ---- what a machine without a GPU can check -----------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _Deleter)]

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_PyCapsule_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_DLTENSOR = b"dltensor"  # lives as long as the module: capsules keep a pointer to it


class FakeCudaProducer:
    """A DLPack producer claiming float32 CUDA memory (device 0 unless told). Nothing
    reads its data: every check below happens before a byte would move.
    It counts the deleter's calls and records the streams it was asked for."""

    def __init__(self, shape, strides=None, device=0):
        self.device = device
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        self.data = ctypes.create_string_buffer(64)
        self.deleted = 0
        self.streams = []
        self.capsules = []
        self._deleter = _Deleter(self._delete)
        self._tensors = []

    def _delete(self, _):
        self.deleted += 1

    def __dlpack_device__(self):
        return (2, self.device)  # kDLCUDA

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        m = _DLManagedTensor()
        t = m.dl_tensor
        t.data = ctypes.cast(self.data, ctypes.c_void_p)
        t.device = _DLDevice(2, self.device)
        t.ndim = len(self.shape)
        t.dtype = _DLDataType(2, 32, 1)  # kDLFloat, 32 bits
        t.shape = self.shape
        if self.strides is not None:
            t.strides = self.strides
        m.deleter = self._deleter
        self._tensors.append(m)
        cap = _PyCapsule_New(ctypes.addressof(m), _DLTENSOR, None)
        self.capsules.append(cap)
        return cap


def test_a_non_contiguous_device_tensor_is_refused_clearly(devcluster):
    """What x.t() of a CUDA tensor exports: refused before anything is sent,
    with what to do; the capsule stays the producer's (unused), so nothing
    is freed twice or leaked by ferry. (A fake producer: no GPU needed.)"""
    fake = FakeCudaProducer((4, 5), strides=(1, 4))
    with pytest.raises(ValueError, match=r"non-contiguous CUDA tensor .*\.contiguous\(\)"):
        ferry.rpc_sync("w1", fns.echo, args=(fake,))
    assert fake.streams == [1]  # exported on the legacy default stream
    assert _PyCapsule_IsValid(fake.capsules[0], _DLTENSOR) == 1  # not consumed
    assert fake.deleted == 0
    # Mixed with host tensors: the host tensors taken before it are freed.
    import numpy as np

    with pytest.raises(ValueError, match="contiguous"):
        ferry.rpc_sync("w1", fns.echo, args=(np.ones(3), fake))
    # The worker is still fine.
    assert ferry.rpc_sync("w1", fns.add, args=(1, 2)) == 3


def test_compact_strides_and_size_one_dims_pass_the_check():
    """Strides that describe a compact layout (size-1 dimensions may have
    any stride) are not refused; the check is the exporter's, no GPU."""
    for shape, strides in (((4, 5), (5, 1)), ((4, 1, 5), (5, 99, 1)), ((0, 3), (1, 7)), ((3,), None)):
        fake = FakeCudaProducer(shape, strides)
        p = _pickling._Pickler(__import__("io").BytesIO(), ferry.RRef)
        assert p._export(fake) == ("t", 0, "dlpack", None)
        cap, owner = p.tensors[0]
        assert owner is fake and fake.streams == [1]


def test_the_sender_records_the_framework():
    class Cupyish(FakeCudaProducer):
        pass

    Cupyish.__module__ = "cupy._core.core"

    class Jaxish(FakeCudaProducer):
        pass

    Jaxish.__module__ = "jaxlib.xla_extension"
    assert _pickling.framework_of(Cupyish((2,))) == "cupy"
    assert _pickling.framework_of(Jaxish((2,))) == "jax"
    assert _pickling.framework_of(FakeCudaProducer((2,))) == "dlpack"
    p = _pickling._Pickler(__import__("io").BytesIO(), ferry.RRef)
    assert p._export(Cupyish((2,))) == ("t", 0, "cupy", None)


def _received(shape=(2, 3), device=0):
    """A DeviceTensor as a message would give it (over a fake producer's
    tensor), and that producer."""
    fake = FakeCudaProducer(shape, device=device)
    return _ferry._device_tensor(fake.__dlpack__()), fake


def test_a_received_device_tensor_is_a_dlpack_producer():
    assert _received(device=3)[0].__dlpack_device__() == (2, 3)
    t, fake = _received((2, 3))
    assert t.__dlpack_device__() == (2, 0) and t.device == (2, 0)
    assert t.shape == (2, 3) and t.dtype == "float32" and t.nbytes == 24
    assert "cuda:0" in repr(t)
    with pytest.raises(TypeError):
        t.__dlpack__(stream="not a stream")
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 1))  # another device
    with pytest.raises(BufferError):
        t.__dlpack__(copy=True)
    # What torch.from_dlpack and cupy.from_dlpack pass: any stream, a max_version.
    cap = t.__dlpack__(stream=7, max_version=(1, 0), dl_device=(2, 0), copy=False)
    assert _PyCapsule_IsValid(cap, _DLTENSOR) == 1 and t.exported
    with pytest.raises(BufferError, match="once"):
        t.__dlpack__()
    assert fake.deleted == 0
    del cap  # unconsumed: the capsule frees it, once
    gc.collect()
    assert fake.deleted == 1


def test_a_received_device_tensor_nobody_takes_is_freed_once():
    t, fake = _received()
    del t
    gc.collect()
    assert fake.deleted == 1


def test_the_receiver_picks_the_framework():
    order = _pickling.device_framework_order
    assert order("torch", {}) == ["torch", "cupy"]
    assert order("cupy", {}) == ["cupy", "torch"]
    assert order("jax", {}) == ["jax", "torch", "cupy"]
    assert order("dlpack", {}) == ["torch", "cupy"]  # a sender's other exporter
    assert order("dlpack", {"cupy": 1}) == ["cupy", "torch"]  # already imported here
    assert order("torch", {"jax": 1}) == ["torch", "jax", "cupy"]

    made = []

    def converters(available):
        def converter(name):
            if name not in available:
                return None
            return lambda t: made.append((name, t)) or (name, t)
        return converter

    t = object()
    assert _pickling.from_device(t, "cupy", converters({"torch", "cupy"})) == ("cupy", t)
    assert _pickling.from_device(t, "cupy", converters({"torch"})) == ("torch", t)
    assert _pickling.from_device(t, "jax", converters({"cupy"})) == ("cupy", t)
    assert _pickling.from_device(t, "torch", converters(set())) is t  # the raw producer


def test_a_cpu_only_torch_is_not_a_device_framework():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here")
    assert _pickling._torch_converter() is None


def test_ferry_imports_before_the_frameworks():
    """`import ferry` first, then torch and CuPy, in a fresh process: the
    extension's pybind11 internals are its own (sharing them with torch
    2.11's crashed torch's import)."""
    import subprocess

    present = [m for m in ("torch", "cupy") if _importable(m)]
    if not present:
        pytest.skip("neither torch nor CuPy is installed")
    code = "import ferry\n" + "".join("import %s\n" % m for m in present) + "print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ---- torch on a GPU ---------------------------------------------------------------

def _torch_cuda():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda is not available (no GPU here, or a CPU-only torch %s): "
                    "device tensors need a CUDA device" % torch.__version__)
    return torch


def _torch_devices():
    try:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        n = 0
    return list(range(min(max(n, 1), 2)))


def test_protocol_torch_exports_and_takes_device_tensors():
    """Without ferry's transport: what the sender exports (on the legacy
    stream) and what torch.from_dlpack makes of a received DeviceTensor, on
    this torch: the same memory, the same device index, handed over once."""
    torch = _torch_cuda()
    for device in _torch_devices():
        x = torch.arange(1000, dtype=torch.float32, device="cuda:%d" % device)
        p = _pickling._Pickler(__import__("io").BytesIO(), ferry.RRef)
        assert p._export(x) == ("t", 0, "torch", ())
        cap, owner = p.tensors[0]
        assert owner is x
        t = _ferry._device_tensor(cap)  # as if it had arrived
        assert t.__dlpack_device__() == (2, device) and t.dtype == "float32"
        y = _pickling.from_device(t, "torch")
        assert type(y) is torch.Tensor and y.device == x.device
        assert y.data_ptr() == x.data_ptr() and torch.equal(y, x)
        with pytest.raises(BufferError):
            t.__dlpack__()
        # A sender's other exporter, or JAX where absent: torch takes it.
        y2 = _pickling.from_device(_ferry._device_tensor(torch.utils.dlpack.to_dlpack(x)),
                                   "dlpack")
        assert type(y2) is torch.Tensor and torch.equal(y2, x)


def test_protocol_cupy_exports_and_takes_device_tensors():
    cupy = _cupy()
    x = cupy.arange(1000, dtype=cupy.float32)
    p = _pickling._Pickler(__import__("io").BytesIO(), ferry.RRef)
    assert p._export(x) == ("t", 0, "cupy", None)
    cap, owner = p.tensors[0]
    y = _pickling.from_device(_ferry._device_tensor(cap), "cupy")
    assert type(y) is cupy.ndarray and y.device.id == x.device.id
    assert y.data.ptr == x.data.ptr and bool((y == x).all())


@pytest.mark.parametrize("device", _torch_devices(), ids=lambda d: "cuda%d" % d)
@pytest.mark.parametrize("size", list(SIZES), ids=str)
def test_torch_scale_on_the_callee_gpu(devcluster, size, device):
    torch = _torch_cuda()
    n = SIZES[size] // 4
    x = torch.randn(n, device="cuda:%d" % device)
    assert ferry.rpc_sync("w1", fns.where_is, args=(x,)) == ("torch", device)
    y = ferry.rpc_sync("w1", fns.scale, args=(x, 2.0), timeout=120)
    assert type(y) is torch.Tensor and y.is_cuda and y.device.index == device
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert torch.equal(y, x * 2.0)  # times two is exact in float32


@pytest.mark.parametrize("size", list(SIZES), ids=str)
def test_torch_bytes_arrive_exactly(devcluster, size):
    torch = _torch_cuda()
    x = torch.randint(0, 256, (SIZES[size],), dtype=torch.uint8, device="cuda")
    y = ferry.rpc_sync("w1", fns.echo, args=(x,), timeout=120)
    assert type(y) is torch.Tensor and y.device == x.device
    assert torch.equal(y, x)


def test_torch_work_on_a_side_stream_is_waited_for(devcluster):
    """A tensor still being written on a non-default stream when the call is
    made: __dlpack__(stream=1) orders that work first, without the caller
    synchronising."""
    torch = _torch_cuda()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.ones(16 << 20, device="cuda")
        for _ in range(200):
            x = x * 1.0001 + 1.0  # queued work, still running when we send
        y = ferry.rpc_sync("w1", fns.echo, args=(x,), timeout=120)
    s.synchronize()
    assert torch.equal(y, x)


def test_torch_handler_returns_a_device_tensor(devcluster):
    torch = _torch_cuda()
    y = ferry.rpc_sync("w1", fns.make_on_device, args=("torch", 1 << 20, 3.5, 0), timeout=120)
    assert type(y) is torch.Tensor and y.is_cuda and y.device.index == 0
    assert torch.equal(y, torch.full((1 << 20,), 3.5, device="cuda"))


def test_torch_mixed_host_and_device(devcluster):
    torch = _torch_cuda()
    import numpy as np

    args = (torch.arange(5.0), torch.arange(6.0, device="cuda"), np.arange(7),
            torch.tensor([True, False], device="cuda"))
    assert ferry.rpc_sync("w1", fns.where_all, args=(list(args),)) == \
        [("torch", None), ("torch", 0), ("numpy", None), ("torch", 0)]
    back = ferry.rpc_sync("w1", fns.echo, args=(args,), timeout=60)
    assert not back[0].is_cuda and torch.equal(back[0], args[0])
    assert back[1].is_cuda and torch.equal(back[1], args[1])
    assert isinstance(back[2], np.ndarray) and (back[2] == args[2]).all()
    assert back[3].is_cuda and back[3].dtype == torch.bool and torch.equal(back[3], args[3])


def test_torch_non_contiguous_device_tensor_is_refused(devcluster):
    torch = _torch_cuda()
    x = torch.arange(20.0, device="cuda").reshape(4, 5).t()
    with pytest.raises(ValueError, match=r"\.contiguous\(\)"):
        ferry.rpc_sync("w1", fns.echo, args=(x,))
    assert torch.equal(ferry.rpc_sync("w1", fns.echo, args=(x.contiguous(),)), x)


def test_torch_handler_returning_a_non_contiguous_device_tensor_fails_the_call(devcluster):
    _torch_cuda()
    with pytest.raises(ValueError, match="contiguous"):
        ferry.rpc_sync("w1", fns.transposed_on_device, args=(), timeout=60)
    assert ferry.rpc_sync("w1", fns.add, args=(1, 2)) == 3


# ---- CuPy on a GPU ----------------------------------------------------------------

def _cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CuPy raises its own CUDA errors
        pytest.skip("CuPy finds no CUDA device (%s)" % e)
    if n == 0:
        pytest.skip("CuPy finds no CUDA device")
    return cupy


@pytest.mark.parametrize("size", list(SIZES), ids=str)
def test_cupy_scale_on_the_callee_gpu(devcluster, size):
    cupy = _cupy()
    n = SIZES[size] // 4
    x = cupy.random.standard_normal(n, dtype=cupy.float32)
    assert ferry.rpc_sync("w1", fns.where_is, args=(x,)) == ("cupy", x.device.id)
    y = ferry.rpc_sync("w1", fns.scale, args=(x, 2.0), timeout=120)
    assert type(y) is cupy.ndarray and y.device.id == x.device.id
    assert y.dtype == cupy.float32 and y.shape == x.shape
    assert bool((y == x * 2.0).all())


@pytest.mark.parametrize("size", list(SIZES), ids=str)
def test_cupy_bytes_arrive_exactly(devcluster, size):
    cupy = _cupy()
    x = cupy.random.randint(0, 256, SIZES[size], dtype=cupy.uint8)
    y = ferry.rpc_sync("w1", fns.echo, args=(x,), timeout=120)
    assert type(y) is cupy.ndarray and y.device.id == x.device.id
    assert bool((y == x).all())


def test_cupy_handler_returns_a_device_tensor(devcluster):
    cupy = _cupy()
    y = ferry.rpc_sync("w1", fns.make_on_device, args=("cupy", 1 << 20, 3.5, 0), timeout=120)
    assert type(y) is cupy.ndarray and y.device.id == 0
    assert bool((y == 3.5).all())


def test_cupy_non_contiguous_is_refused(devcluster):
    cupy = _cupy()
    x = cupy.arange(20, dtype=cupy.float32).reshape(4, 5).T
    with pytest.raises(ValueError, match="ascontiguousarray"):
        ferry.rpc_sync("w1", fns.echo, args=(x,))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
