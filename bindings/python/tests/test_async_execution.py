"""functions.async_execution: the handler answers when its Future does."""

import pytest

import ferry
import remote_fns as fns


def test_async_function_answers_with_its_futures_value(cluster):
    assert ferry.rpc_sync("w1", fns.async_add_via, args=("w2", 2, 3)) == 50
    assert ferry.rpc_async("w2", fns.async_add_via, args=("w1", 1, 1)).wait() == 20
    assert ferry.remote("w1", fns.async_add_via, args=("w2", 4, 4)).to_here() == 80


def test_many_async_calls_in_flight_do_not_exhaust_handler_threads(cluster):
    futs = [ferry.rpc_async("w1", fns.async_add_via, args=("w2", i, 0)) for i in range(64)]
    assert [f.wait(30) for f in futs] == [10 * i for i in range(64)]


def test_async_function_returning_no_future_fails_clearly(cluster):
    with pytest.raises(TypeError, match="must return a Future"):
        ferry.rpc_sync("w1", fns.async_not_a_future)
