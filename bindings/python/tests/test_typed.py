"""A Python caller of typed C++ functions (ferry.typed, ferry/typed.hpp):
the C++ test worker (ferry-test-worker, test_worker_main.cc) defines them."""

import numpy as np
import pytest

import ferry
import ferry.typed


def test_values_of_their_own_types(cpp_worker):
    assert ferry.typed.call(cpp_worker, "typed_add", 40, 2) == 42
    assert ferry.typed.call(cpp_worker, "typed_describe", "py", [1, 2, 3],
                            {"a": 1.5, "b": 2.5}) == "py: 3 values, sum 6, 2 weights, total 4"


def test_a_tensor_travels_as_a_segment(cpp_worker):
    x = np.arange(4, dtype=np.float32)
    y = ferry.typed.call(cpp_worker, "typed_scale", x, 2.5)
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, np.arange(4, dtype=np.float32) * 2.5)
    np.testing.assert_array_equal(x, np.arange(4, dtype=np.float32))  # ours untouched


def test_errors_keep_their_status(cpp_worker):
    with pytest.raises(ferry.NotFoundError, match="on purpose"):
        ferry.typed.call(cpp_worker, "typed_fail")
    with pytest.raises(ferry.InvalidArgumentError, match=r"takes \(int64, int64\)"):
        ferry.typed.call(cpp_worker, "typed_add", "forty", 2)
    with pytest.raises(ferry.DeadlineExceededError):
        ferry.typed.call(cpp_worker, "typed_sleep", 1000, timeout=0.2)


def test_a_raw_reply_is_not_taken_for_a_typed_one(cpp_worker):
    with pytest.raises(ValueError, match="not a typed payload"):
        ferry.typed.call(cpp_worker, "make", 1)
