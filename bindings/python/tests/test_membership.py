"""Elastic membership: late joins, graceful leaves, killed workers."""

import threading
import time

import pytest

import ferry
import remote_fns as fns
from conftest import Cluster


@pytest.fixture
def fresh():
    c = Cluster()
    yield c
    c.close()


def test_join_late_leave_and_callbacks(fresh):
    events = []
    seen = threading.Condition()

    def record(info, event):
        with seen:
            events.append((info.name, event))
            seen.notify_all()

    ferry.on_membership(record)
    joined = []
    ferry.on_join(lambda info: joined.append(info.name))
    fresh.start("late")
    ferry.wait_for_workers(2, timeout=10)
    assert ferry.rpc_sync("late", fns.whoami) == "late"
    with seen:
        assert seen.wait_for(lambda: ("late", "joined") in events, 10)
    fresh.stop("late")  # graceful
    with seen:
        assert seen.wait_for(lambda: ("late", "left") in events, 10)
    assert "late" in joined
    assert [i.name for i in ferry.workers()] == ["driver"]


def test_a_call_to_a_worker_not_joined_yet_waits_for_it(fresh):
    fut = ferry.rpc_async("later", fns.whoami, timeout=20)
    fresh.start("later")
    assert fut.wait(20) == "later"


def test_killed_worker_fails_pending_calls_with_peer_gone(fresh):
    fresh.start("victim")
    gone = threading.Event()
    ferry.on_membership(lambda info, e: info.name == "victim" and e == "gone" and gone.set())
    pending = ferry.rpc_async("victim", fns.wait_gate, args=(60,), timeout=60)
    rref = ferry.remote("victim", fns.Counter)
    rref.to_here()
    start = time.monotonic()
    fresh.kill("victim")
    with pytest.raises(ferry.PeerGoneError):
        pending.wait(30)
    elapsed = time.monotonic() - start
    assert elapsed < 10, "peer death took %.1fs to surface" % elapsed
    with pytest.raises(ferry.PeerGoneError):
        rref.to_here(timeout=10)
    assert gone.wait(10)
    with pytest.raises(ferry.FerryError):
        ferry.rpc_sync("victim", fns.whoami, timeout=1)


def test_graceful_shutdown_finishes_this_workers_work(fresh):
    fresh.start("slow")
    fut = ferry.rpc_async("slow", fns.call_other, args=("driver", fns.add, (1, 2)))
    assert fut.wait(10) == 3
    # The callee leaves while a call into it runs: the call is answered
    # first, then the callee is gone and new calls fail clearly.
    running = ferry.rpc_async("slow", fns.slow_add, args=(1, 2, 0.5))
    ferry.rpc_sync("slow", fns.shutdown_soon)
    assert running.wait(30) == 3
    assert fresh.procs["slow"].wait(30) == 0
    with pytest.raises(ferry.FerryError):
        ferry.rpc_sync("slow", fns.whoami, timeout=1)
