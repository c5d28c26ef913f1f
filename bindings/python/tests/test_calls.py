"""rpc_sync, rpc_async, futures and errors between real worker processes."""

import asyncio
import threading

import pytest

import ferry
import remote_fns as fns


def test_rpc_sync_runs_on_the_callee(cluster):
    assert ferry.rpc_sync("w1", fns.whoami) == "w1"
    assert ferry.rpc_sync("w2", fns.add, args=(2, 3)) == 5
    assert ferry.rpc_sync("w1", fns.add, kwargs={"a": "x", "b": "y"}) == "xy"


def test_target_by_name_id_or_worker_info(cluster):
    info = ferry.get_worker_info("w2")
    assert isinstance(info, ferry.WorkerInfo) and info.name == "w2"
    assert ferry.rpc_sync(info, fns.whoami) == "w2"
    assert ferry.rpc_sync(info.id, fns.whoami) == "w2"


def test_thread_local_state_of_a_handler_thread_persists_across_calls(cluster):
    # A handler runs on one of a few long-lived threads: what it keeps in a
    # threading.local (a cache, a random generator, a CUDA stream) is there
    # for the next call that thread serves, not lost after every call.
    served = {}
    for _ in range(20):
        ident, n = ferry.rpc_sync("w1", fns.count_on_this_thread)
        served.setdefault(ident, []).append(n)
    for counts in served.values():
        first = counts[0]
        assert counts == list(range(first, first + len(counts)))
    assert max(len(c) for c in served.values()) >= 2 and max(c[-1] for c in served.values()) >= 2


def test_builtins_and_library_functions_go_by_reference(cluster):
    assert ferry.rpc_sync("w1", sorted, args=([3, 1, 2],)) == [1, 2, 3]
    assert ferry.rpc_sync("w1", max, args=(3, 9)) == 9


def test_rpc_async_future_wait_done_value(cluster):
    fut = ferry.rpc_async("w1", fns.add, args=(1, 2))
    assert fut.wait(timeout=10) == 3
    assert fut.done() and fut.value() == 3


def test_many_futures_in_flight(cluster):
    futs = [ferry.rpc_async("w%d" % (i % 2 + 1), fns.add, args=(i, i)) for i in range(200)]
    assert [f.wait() for f in futs] == [2 * i for i in range(200)]


def test_then_chains_and_callbacks_run(cluster):
    fut = ferry.rpc_async("w2", fns.add, args=(20, 1))
    chained = fut.then(lambda f: f.value() * 2)
    seen = threading.Event()
    got = []
    fut.add_done_callback(lambda f: (got.append(f.value()), seen.set()))
    assert chained.wait(10) == 42
    assert seen.wait(10) and got == [21]


def test_then_propagates_the_callbacks_exception(cluster):
    fut = ferry.rpc_async("w2", fns.add, args=(1, 1)).then(lambda f: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        fut.wait(10)


def test_await_in_asyncio(cluster):
    async def main():
        a = ferry.rpc_async("w1", fns.add, args=(1, 1))
        b = ferry.rpc_async("w2", fns.add, args=(2, 2))
        return await a, await b

    assert asyncio.run(main()) == (2, 4)


def test_user_made_future(cluster):
    fut = ferry.Future()
    threading.Thread(target=lambda: fut.set_result("late")).start()
    assert fut.wait(10) == "late"
    with pytest.raises(RuntimeError):
        fut.set_result("twice")


def test_remote_exception_keeps_its_type_and_traceback(cluster):
    with pytest.raises(ValueError) as e:
        ferry.rpc_sync("w1", fns.fail_with, args=("value", "bad input 42"))
    assert e.value.args == ("bad input 42",)
    assert "fail_with" in e.value.remote_traceback and "w1" in e.value.remote_traceback
    with pytest.raises(fns.CustomError):
        ferry.rpc_sync("w1", fns.fail_with, args=("custom", "mine"))
    with pytest.raises(KeyError):
        ferry.rpc_async("w2", fns.fail_with, args=("key", "k")).wait()


def test_remote_exception_with_its_own_constructor_keeps_its_type(cluster):
    # It crosses pickled, so a constructor that does not take a message
    # is no obstacle (test_errors.py: the ones that cannot cross).
    with pytest.raises(fns.Unconstructible) as e:
        ferry.rpc_sync("w1", fns.fail_unconstructible)
    assert e.value.args == (1, 2)


def test_timeout_is_a_deadline_error(cluster):
    with pytest.raises(TimeoutError):
        ferry.rpc_sync("w1", fns.wait_gate, args=(30,), timeout=0.3)
    with pytest.raises(ferry.DeadlineExceededError):
        ferry.rpc_async("w1", fns.wait_gate, args=(30,), timeout=0.3).wait()
    ferry.rpc_sync("w1", fns.release_gate)


def test_future_wait_timeout_leaves_the_call_running(cluster):
    fut = ferry.rpc_async("w2", fns.wait_gate, args=(30,))
    with pytest.raises(TimeoutError):
        fut.wait(timeout=0.2)
    assert not fut.done()
    ferry.rpc_sync("w2", fns.release_gate)
    assert fut.wait(10) is True


def test_nested_call_from_inside_a_handler(cluster):
    assert ferry.rpc_sync("w1", fns.call_other, args=("w2", fns.whoami, ())) == "w2"


def test_unknown_worker_fails_clearly(cluster):
    with pytest.raises(ferry.FerryError) as e:
        ferry.rpc_sync("nobody", fns.add, args=(1, 2), timeout=0.5)
    assert "nobody" in str(e.value)


def test_unknown_function_name_lists_what_exists(cluster):
    with pytest.raises(ferry.NotFoundError) as e:
        ferry.rpc_sync("w1", "no_such_function", args=(b"x",))
    assert "no_such_function" in str(e.value) and "ferry.py.call" in str(e.value)


def test_unpicklable_argument_is_refused_before_sending(cluster):
    with pytest.raises(TypeError, match="module level"):
        ferry.rpc_sync("w1", fns.echo, args=(lambda: 1,))
    with pytest.raises(TypeError, match="module level"):
        ferry.rpc_sync("w1", lambda: 1)
    assert ferry.rpc_sync("w1", fns.echo, args=(7,)) == 7  # nothing lost


def test_unpicklable_result_fails_the_call(cluster):
    with pytest.raises(TypeError, match="cannot send"):
        ferry.rpc_sync("w1", threading.Lock)  # a lock cannot be pickled back


def test_self_calls_run_here(cluster):
    assert ferry.rpc_sync("driver", fns.add, args=(1, 2)) == 3
    assert ferry.rpc_async("driver", fns.add, args=(1, 2)).wait() == 3
    assert ferry.remote("driver", fns.Counter, args=(5,)).to_here().get() == 5


def test_workers_lists_the_job(cluster):
    names = sorted(i.name for i in ferry.workers())
    assert names == ["driver", "w1", "w2"]
    me = ferry.get_worker_info()
    assert me.name == "driver" and me.transport == "self"
    assert ferry.get_worker_info("w1").transport == "tcp"
