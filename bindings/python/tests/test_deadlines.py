"""Deadlines and cancellation reach the callee (docs/api.md, "Deadlines and
cancellation"): with real worker processes."""

import time

import pytest

import cancel_fns as cf
import ferry
import remote_fns as fns
from conftest import Cluster


@pytest.fixture(scope="module")
def cl():
    c = Cluster()
    c.start("w1")
    c.start("w2")
    yield c
    c.close()


def test_a_handler_reads_its_call(cl):
    function, caller, remaining, has_deadline, cancelled = ferry.rpc_sync(
        "w1", cf.call_info, timeout=5)
    assert function == "call_info"
    assert caller == "driver"
    assert has_deadline and 4.0 < remaining <= 5.0
    assert cancelled is False
    assert ferry.current_call() is None
    assert ferry.rpc_sync("w1", cf.outside_a_handler)


def test_a_nested_call_inherits_the_deadline_unless_given_its_own(cl):
    *_, remaining, has_deadline, _ = ferry.rpc_sync("w1", cf.nested_info, args=("w2",),
                                                    timeout=3)
    assert has_deadline and 2.0 < remaining <= 3.0
    *_, remaining, _, _ = ferry.rpc_sync("w1", cf.nested_info, args=("w2", 20), timeout=3)
    assert 19.0 < remaining <= 20.0


def test_future_cancel_reaches_a_running_handler(cl):
    fut = ferry.rpc_async("w2", cf.until_cancelled, args=(30,))
    assert ferry.rpc_sync("w2", cf.wait_started, args=(10,))
    assert fut.cancel() is True
    assert fut.done()
    with pytest.raises(ferry.CancelledError):
        fut.wait()
    assert fut.cancel() is False  # done already
    assert ferry.rpc_sync("w2", cf.saw_cancel, args=(10,))


def test_a_running_handler_sees_its_callers_deadline_pass(cl):
    t0 = time.monotonic()
    try:
        # The handler may see the deadline pass (and answer) just before the
        # caller's own timer ends the call: either way it stopped.
        assert ferry.rpc_sync("w1", cf.until_cancelled, args=(30,), timeout=0.3) == "stopped"
    except ferry.DeadlineExceededError:
        pass
    assert time.monotonic() - t0 < 5
    assert ferry.rpc_sync("w1", cf.saw_cancel, args=(10,))


def test_calls_queued_for_a_caller_that_timed_out_are_dropped(cl):
    before = ferry.rpc_sync("w1", cf.dropped)
    futs = [ferry.rpc_async("w1", cf.slow, args=(0.25,), timeout=0.4) for _ in range(40)]
    late = 0
    for f in futs:
        try:
            f.wait()
        except ferry.DeadlineExceededError:
            late += 1
    assert late >= 30  # the first handlers may finish in time
    # 4 handler threads: without dropping, this waits behind ~2 s of work.
    t0 = time.monotonic()
    assert ferry.rpc_sync("w1", fns.add, args=(1, 2)) == 3
    assert time.monotonic() - t0 < 1.0
    assert ferry.rpc_sync("w1", cf.dropped) - before >= 25


def test_calls_queued_for_a_killed_caller_are_dropped(cl):
    cl.start("caller")
    before = ferry.rpc_sync("w1", cf.dropped)
    assert ferry.rpc_sync("caller", cf.flood, args=("w1", 40, 0.25)) == 40
    cl.kill("caller")  # SIGKILL, 39 of its calls still at w1
    t0 = time.monotonic()
    assert ferry.rpc_sync("w1", fns.add, args=(1, 2)) == 3
    assert time.monotonic() - t0 < 1.5  # not behind ~2.3 s of dead work
    assert ferry.rpc_sync("w1", cf.dropped) - before >= 25


def test_calls_to_this_worker_run_on_a_handler_thread_under_their_deadline(cl):
    t0 = time.monotonic()
    fut = ferry.rpc_async("driver", cf.slow, args=(0.5,))
    assert time.monotonic() - t0 < 0.3  # not run inline
    assert fut.wait() == 0.5
    assert ferry.rpc_sync(ferry.get_worker_info(), fns.add, args=(1, 2)) == 3
    t0 = time.monotonic()
    try:
        assert ferry.rpc_sync("driver", cf.until_cancelled, args=(30,), timeout=0.3) == "stopped"
    except ferry.DeadlineExceededError:
        pass
    assert time.monotonic() - t0 < 5
    assert cf.saw_cancel(10)


def test_blocking_nested_calls_neither_starve_nor_deadlock(cl):
    # 16 handlers on w1 each wait for w2, whose handlers each wait for w1
    # again: with 4 handler threads and no growth this deadlocks until the
    # calls' deadline.
    t0 = time.monotonic()
    futs = [ferry.rpc_async("w1", cf.bounce, args=("w2", "w1"), timeout=20)
            for _ in range(16)]
    assert [f.wait() for f in futs] == [3] * 16
    assert time.monotonic() - t0 < 5
    # 8 blocking nested calls in flight reach at least a quarter of the
    # throughput of the same work written with async_execution.
    cf.throughput("w1", cf.relay_async, 200, 8, "w2")  # warm-up
    fast = cf.throughput("w1", cf.relay_async, 1500, 8, "w2")
    blocking = cf.throughput("w1", cf.relay, 1500, 8, "w2")
    assert blocking >= fast / 4, (blocking, fast)
