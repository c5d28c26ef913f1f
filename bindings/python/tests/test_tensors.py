"""Tensors travel beside the pickle, by DLPack, and arrive as what they were."""

import tracemalloc

import numpy as np
import pytest
import torch

import ferry
import remote_fns as fns

NUMPY_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                np.uint8, np.uint16, np.uint32, np.uint64, np.complex64, np.complex128, np.bool_]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_dtypes_round_trip(cluster, dtype):
    a = (np.arange(24) % 3).astype(dtype).reshape(2, 3, 4)
    b = ferry.rpc_sync("w1", fns.echo, args=(a,))
    assert isinstance(b, np.ndarray) and b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [(), (0,), (1,), (5, 0, 2), (7, 1, 3)])
def test_numpy_shapes(cluster, shape):
    a = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    b = ferry.rpc_sync("w2", fns.echo, args=(a,))
    assert b.shape == a.shape
    np.testing.assert_array_equal(a, b)


def test_arrivals_are_writable_numpy(cluster):
    kind, dtype, shape, writable = ferry.rpc_sync("w1", fns.describe, args=(np.ones((3, 2)),))
    assert (kind, dtype, shape, writable) == ("numpy", "float64", (3, 2), True)
    b = ferry.rpc_sync("w1", fns.echo, args=(np.zeros(4),))
    b[0] = 5  # the caller may use the result in place
    assert b[0] == 5


def test_non_contiguous_input_is_made_contiguous(cluster):
    a = np.arange(20.0).reshape(4, 5)
    for view in (a.T, a[:, ::2], a[::-1]):
        np.testing.assert_array_equal(ferry.rpc_sync("w1", fns.echo, args=(view,)), view)
    t = torch.arange(12.0).reshape(3, 4).t()
    assert torch.equal(ferry.rpc_sync("w1", fns.echo, args=(t,)), t)


def test_read_only_array_falls_back_to_the_buffer_protocol(cluster):
    a = np.arange(6.0)
    a.flags.writeable = False
    with pytest.raises(BufferError):
        a.__dlpack__()  # what numpy 1.24 does: the fallback is needed
    b = ferry.rpc_sync("w2", fns.echo, args=(a,))
    np.testing.assert_array_equal(a, b)
    assert b.flags.writeable


def test_torch_stays_torch(cluster):
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8,
                  torch.float16, torch.bfloat16, torch.bool, torch.complex64):
        t = (torch.arange(12) % 2).to(dtype).reshape(3, 4)
        back = ferry.rpc_sync("w1", fns.echo, args=(t,))
        assert isinstance(back, torch.Tensor) and back.dtype == dtype, dtype
        assert torch.equal(back, t), dtype
    assert ferry.rpc_sync("w1", fns.torch_describe, args=(torch.zeros(2, 3),)) == \
        (True, "torch.float32", (2, 3), False)


def test_requires_grad_is_sent_detached_and_restored(cluster):
    t = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        t.__dlpack__()  # what torch 1.13 does: the fallback is needed
    assert ferry.rpc_sync("w1", fns.torch_describe, args=(t,)) == (True, "torch.float32", (3,), True)


def test_nested_structures_and_state_dicts(cluster):
    model = torch.nn.Linear(4, 3)
    tree = {"state": model.state_dict(), "np": [np.ones(5), (np.full(2, 3.0), 1)], "n": 7}
    back = ferry.rpc_sync("w2", fns.echo, args=(tree,))
    assert back["n"] == 7
    for k, v in model.state_dict().items():
        assert isinstance(back["state"][k], torch.Tensor) and torch.equal(back["state"][k], v)
    np.testing.assert_array_equal(back["np"][1][0], np.full(2, 3.0))
    expected = float(sum(v.sum() for v in model.state_dict().values())) + 5 + 6 + 1
    assert ferry.rpc_sync("w2", fns.sum_tensors, args=([model.state_dict(), tree["np"]],)) == \
        pytest.approx(expected)
    loaded = torch.nn.Linear(4, 3)
    loaded.load_state_dict(back["state"])


def test_aliasing_survives(cluster):
    a = np.ones(3)
    assert ferry.rpc_sync("w1", fns.is_same_object, args=(a, a)) is True
    assert ferry.rpc_sync("w1", fns.is_same_object, args=(a, a.copy())) is False


def test_object_arrays_go_by_pickle(cluster):
    a = np.array([{"x": 1}, None], dtype=object)
    assert list(ferry.rpc_sync("w1", fns.echo, args=(a,))) == [{"x": 1}, None]


def test_large_tensors(cluster):
    a = np.random.default_rng(0).integers(0, 255, size=64 << 20, dtype=np.uint8)
    b = ferry.rpc_sync("w2", fns.echo, args=(a,), timeout=60)
    assert b.nbytes == a.nbytes and np.array_equal(a, b)
    t = torch.randn(4096, 4096)  # 64 MiB
    assert torch.equal(ferry.rpc_sync("w1", fns.echo, args=(t,), timeout=60), t)


def test_sending_does_not_copy_the_tensor(cluster):
    """The send side never copies tensor bytes into Python memory: a 32 MiB
    argument costs the caller far less than 32 MiB of Python allocations
    (pickling it in-band would cost at least 32 MiB). The received echo's
    bytes belong to ferry, not to Python's allocator."""
    a = np.ones(32 << 20, dtype=np.uint8)
    tracemalloc.start()
    try:
        ferry.rpc_sync("w1", fns.describe, args=(a,))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (1 << 20), "the send allocated %d bytes in Python" % peak


def test_raw_payload_to_a_cpp_worker_and_back(cluster, cpp_worker):
    out = ferry.rpc_sync(cpp_worker, "echo", args=(b"hello", np.arange(5, dtype=np.int32)))
    assert out.data == b"hello"
    np.testing.assert_array_equal(out.tensors[0], np.arange(5, dtype=np.int32))
