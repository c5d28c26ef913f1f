"""RRefs: remote(), to_here, local_value, proxies, sharing, deletion."""

import time

import numpy as np
import pytest

import ferry
import remote_fns as fns


def _until(condition, timeout=10.0):
    """Polls a condition another process makes true (there is no event to
    wait on across processes); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in %ss" % timeout
        time.sleep(0.01)


def test_remote_returns_at_once_and_to_here_fetches(cluster):
    rref = ferry.remote("w1", fns.add, args=(np.ones(3), 1))
    assert not rref.is_owner()
    assert rref.owner().name == "w1" and rref.owner_name() == "w1"
    np.testing.assert_array_equal(rref.to_here(), np.full(3, 2.0))
    assert rref.confirmed_by_owner()


def test_proxies_mutate_the_owners_object_in_place(cluster):
    counter = ferry.remote("w2", fns.Counter, args=(10,))
    assert counter.rpc_sync().increment(5) == 15
    assert counter.rpc_async().increment().wait() == 16
    assert counter.rpc_sync().get() == 16
    assert counter.to_here().value == 16  # a copy of the object as it is now
    doubled = counter.remote().increment(16)  # an RRef to the method's result
    assert doubled.to_here() == 32 and doubled.owner_name() == "w2"


def test_rref_as_argument_forks_to_a_third_worker(cluster):
    counter = ferry.remote("w1", fns.Counter, args=(3,))
    assert ferry.rpc_sync("w2", fns.counter_get, args=(counter,)) == 3
    assert ferry.rpc_sync("w2", fns.rref_owner_name, args=(counter,)) == "w1"
    assert ferry.rpc_sync("w1", fns.counter_get, args=(counter,)) == 3  # back to its owner


def test_rref_returned_from_a_call(cluster):
    rref = ferry.rpc_sync("w2", fns.make_rref, args=({"k": 1},))
    assert isinstance(rref, ferry.RRef) and rref.owner_name() == "w2"
    assert rref.to_here() == {"k": 1}


def test_local_rref_and_local_value(cluster):
    value = {"weights": np.zeros(2)}
    rref = ferry.RRef(value)
    assert rref.is_owner() and rref.local_value() is value
    assert rref.to_here() is value
    assert ferry.rpc_sync("w1", fns.counter_get, args=(ferry.RRef(fns.Counter(4)),)) == 4


def test_local_value_on_a_user_is_an_error(cluster):
    rref = ferry.remote("w1", fns.Counter)
    with pytest.raises(RuntimeError, match="owner"):
        rref.local_value()


def test_remote_failure_surfaces_in_to_here_with_its_type(cluster):
    rref = ferry.remote("w1", fns.fail_with, args=("value", "no model"))
    with pytest.raises(ValueError, match="no model"):
        rref.to_here()


def test_remote_deadline_bounds_the_creation(cluster):
    """remote()'s timeout bounds the RRef's creation on its owner; here the
    owner never joins, and remote() fails once the deadline passed."""
    start = time.monotonic()
    with pytest.raises(ferry.NotFoundError, match="ghost"):
        ferry.remote("ghost", fns.Counter, timeout=0.3)
    assert time.monotonic() - start < 5


def test_owner_deletes_the_value_when_no_user_remains(cluster):
    base = ferry.rpc_sync("w1", fns.stats)["owned_rrefs"]
    rrefs = [ferry.remote("w1", fns.Counter, args=(i,)) for i in range(20)]
    assert [r.to_here().value for r in rrefs] == list(range(20))
    shared = rrefs[0]
    ferry.rpc_sync("w2", fns.counter_get, args=(shared,))
    del rrefs
    assert shared.to_here().value == 0  # one user left: still alive
    _until(lambda: ferry.rpc_sync("w1", fns.stats)["owned_rrefs"] == base + 1)
    del shared
    _until(lambda: ferry.rpc_sync("w1", fns.stats)["owned_rrefs"] == base)
