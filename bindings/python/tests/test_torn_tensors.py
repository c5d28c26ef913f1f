"""No torn tensors: what arrives is what a tensor held at the call (an
argument) or when the result was given (a result), however it is written
afterwards; zero-copy without that guarantee is an explicit opt-in.

Real worker processes (conftest.py). The writes race with bytes still
leaving, which is what tore them before ferry copied (issue 28: 5 of 5 runs
reached the callee half-applied), so each case is repeated."""

import numpy as np
import pytest
import torch

import ferry
import remote_fns as fns

N = 2 << 20  # 8 MiB of float32
RUNS = 5


def _snapshots():
    s = ferry.stats()
    return s["snapshot_tensors"], s["snapshot_bytes"]


def test_numpy_argument_written_after_rpc_async_arrives_as_it_was(cluster):
    changed = []
    for _ in range(RUNS):
        x = np.zeros(N, np.float32)
        fut = ferry.rpc_async("w1", fns.count_changed, args=(x, 0.0))
        x += 1  # right after the call returned: must not reach the callee
        changed.append(fut.wait())
    assert changed == [0] * RUNS


def test_torch_argument_written_after_rpc_async_arrives_as_it_was(cluster):
    changed = []
    for _ in range(RUNS):
        x = torch.zeros(N, dtype=torch.float32)
        fut = ferry.rpc_async("w1", fns.count_changed, args=(x, 0.0))
        x += 1
        changed.append(fut.wait())
    assert changed == [0] * RUNS


def test_argument_of_remote_arrives_as_it_was(cluster):
    x = np.zeros(N, np.float32)
    rref = ferry.remote("w2", fns.count_changed, args=(x, 0.0))
    x += 1
    assert rref.to_here() == 0


def test_live_result_updated_by_another_thread_is_a_snapshot(cluster):
    # The callee's thread sets the result, then goes on writing the array.
    for _ in range(RUNS):
        r = ferry.rpc_sync("w1", fns.live_weights, args=(N, 20))
        assert r.shape == (N,)
        assert np.count_nonzero(r) == 0


def test_rpc_async_copies_once_into_a_pooled_buffer_and_opt_ins_do_not(cluster):
    x = np.zeros(N, np.float32)
    t0 = _snapshots()
    ferry.rpc_async("w1", fns.count_changed, args=(x, 0.0)).wait()
    t1 = _snapshots()
    assert t1 == (t0[0] + 1, t0[1] + x.nbytes)  # the default: one copy
    # The opt-ins and rpc_sync send from x itself.
    ferry.rpc_async("w1", fns.count_changed, args=(ferry.zero_copy(x), 0.0)).wait()
    ferry.rpc_async("w1", fns.count_changed, args=(x, 0.0), zero_copy=True).wait()
    assert ferry.rpc_sync("w1", fns.count_changed, args=(x, 0.0)) == 0
    assert _snapshots() == t1
    # Per tensor: only the one not marked is copied.
    y = torch.zeros(N, dtype=torch.float32)
    ferry.rpc_async("w1", fns.count_changed, args=((ferry.zero_copy(x), y), 0.0))
    assert _snapshots() == (t1[0] + 1, t1[1] + y.numel() * 4)


def test_zero_copy_opt_in_sends_the_live_bytes(cluster):
    # The opt-in's contract is "do not write until the future is done":
    # a write made anyway while the bytes are still leaving reaches the
    # callee (what every call did before issue 28). It is a race, so this
    # only asks that some of many runs show it, and that the default never
    # does on the same runs.
    torn = 0
    for _ in range(20):
        x = np.zeros(N, np.float32)
        fut = ferry.rpc_async("w1", fns.count_changed, args=(x, 0.0), zero_copy=True)
        x += 1
        torn += fut.wait() > 0
    if torn == 0:
        pytest.skip("no write overtook the send in 20 runs (a fast machine): nothing shown")
    assert torn > 0


def test_results_nothing_references_are_not_copied(cluster):
    def callee_snapshots():
        s = ferry.rpc_sync("w2", fns.stats)
        return s["snapshot_tensors"], s["snapshot_bytes"]

    before = callee_snapshots()
    x = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(ferry.rpc_sync("w2", fns.echo, args=(x,)), x)  # received
    assert ferry.rpc_sync("w2", fns.fresh_zeros, args=(N,)).shape == (N,)  # made there
    assert callee_snapshots() == before
    ferry.rpc_sync("w2", fns.kept_zeros, args=(N, True))  # kept, but ferry.zero_copy()
    assert callee_snapshots() == before
    ferry.rpc_sync("w2", fns.kept_zeros, args=(N, False))  # kept: copied
    assert callee_snapshots() == (before[0] + 1, before[1] + N * 4)


def test_zero_copy_rejects_what_is_not_a_tensor(cluster):
    with pytest.raises(TypeError, match="zero_copy"):
        ferry.rpc_async("w1", fns.echo, args=(ferry.zero_copy([1, 2]),))


def test_rpc_sync_to_this_worker_itself_does_not_alias_the_argument(cluster):
    # No wire between: without a copy the handler (and its result) would be
    # this very memory.
    x = np.zeros(16, np.float32)
    y = ferry.rpc_sync("driver", fns.echo, args=(x,))
    y += 1
    assert np.count_nonzero(x) == 0
