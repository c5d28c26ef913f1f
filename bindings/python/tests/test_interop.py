"""Functions registered by name: Python <-> C++ in both directions."""

import numpy as np
import pytest

import ferry


def test_python_calls_a_cpp_function(cluster, cpp_worker):
    out = ferry.rpc_sync(cpp_worker, "make", args=(b"abc",))
    assert out == ferry.Raw(b"made:abc", [], [])
    echoed = ferry.rpc_sync(cpp_worker, "echo", args=(b"t", np.arange(6.0).reshape(2, 3)))
    np.testing.assert_array_equal(echoed.tensors[0], np.arange(6.0).reshape(2, 3))


def test_cpp_calls_a_python_function(cluster, cpp_worker):
    def scale(data, tensors):
        factor = int(data)
        return b"scaled", [t * factor for t in tensors]

    ferry.register("scale", scale)
    # The C++ worker's "call" makes a C++ rpc_sync to "driver"'s "scale".
    out = ferry.rpc_sync(cpp_worker, "call", args=(b"driver scale 3", np.arange(4, dtype=np.int64)))
    assert out.data == b"scaled"
    np.testing.assert_array_equal(out.tensors[0], np.arange(4) * 3)


def test_a_python_function_by_name_may_fail(cluster, cpp_worker):
    ferry.register("broken", lambda data, tensors: 1 / 0)
    # The exception crosses two hops (C++ forwards the status it got) and
    # is re-raised here with its type and the Python traceback.
    with pytest.raises(ZeroDivisionError) as e:
        ferry.rpc_sync(cpp_worker, "call", args=(b"driver broken x",))
    assert "test_interop.py" in e.value.remote_traceback


def test_raw_remote_to_a_cpp_function(cluster, cpp_worker):
    rref = ferry.remote(cpp_worker, "make", args=(b"r",))
    assert rref.to_here().data == b"made:r"
