"""One process of a torch.distributed.rpc program on the FERRY backend
(test_torch_backend.py starts world_size of them).

    torch_backend_worker.py SCENARIO RANK WORLD_SIZE INIT_METHOD TRANSPORT

Rank 0 drives the scenario and checks every result itself; the others
serve. Each process prints "OK <scenario>" as its last line on success.
"""

import os
import sys
import time

import torch
import torch.distributed.rpc as rpc

import ferry.torch  # registers BackendType.FERRY


def add_in_place(t, k):
    t.add_(k)  # the caller's tensor must not change: arguments are copies
    return t


def echo(*args):
    return args


def raise_value_error(text):
    raise ValueError(text)


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def die():
    os._exit(17)


def rref_sum(rref):
    return rref.to_here().sum()


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, k):
        self.value += k
        return self.value


def scenario_calls(rank, world_size):
    peer = "worker1"
    # rpc_sync on a builtin (a TorchScript call) and on a Python UDF.
    assert torch.equal(rpc.rpc_sync(peer, torch.add, args=(torch.ones(3), 2)),
                       torch.full((3,), 3.0))
    t = torch.arange(6.0)
    out = rpc.rpc_sync(peer, add_in_place, args=(t, 1))
    assert torch.equal(out, torch.arange(6.0) + 1) and torch.equal(t, torch.arange(6.0))
    # A call to this worker itself copies its arguments too.
    out = rpc.rpc_sync("worker0", add_in_place, args=(t, 1))
    assert torch.equal(t, torch.arange(6.0)), "a self-call wrote into the caller's tensor"

    # 64 calls in flight, to every worker.
    futs = [rpc.rpc_async("worker%d" % (i % world_size), torch.mul, args=(torch.ones(4), i))
            for i in range(64)]
    for i, f in enumerate(futs):
        assert torch.equal(f.wait(), torch.full((4,), float(i)))

    # Tensors: large ones, views, and two views of one storage.
    big = torch.randn(2 << 20)  # 8 MiB
    assert torch.equal(rpc.rpc_sync(peer, echo, args=(big,))[0], big)
    base = torch.arange(100.0)
    a, b = base[10:20], base[15:40:5]
    ra, rb = rpc.rpc_sync(peer, echo, args=(a, b))
    assert torch.equal(ra, a) and torch.equal(rb, b)
    assert ra.storage().data_ptr() == rb.storage().data_ptr(), "views lost their storage"
    empty = rpc.rpc_sync(peer, echo, args=(torch.empty(0), torch.zeros(2, 0, 3)))
    assert empty[0].numel() == 0 and empty[1].shape == (2, 0, 3)
    for dtype in (torch.int8, torch.float64, torch.bool, torch.complex64):
        x = torch.ones(5, dtype=dtype)
        assert torch.equal(rpc.rpc_sync(peer, echo, args=(x,))[0], x)

    # Remote exceptions keep their type and message.
    try:
        rpc.rpc_sync(peer, raise_value_error, args=("boom",))
        raise AssertionError("no exception")
    except ValueError as e:
        assert "boom" in str(e), e

    # A call that outlives its timeout fails with torch's timeout error.
    fut = rpc.rpc_async(peer, sleep_then, args=(5, 1), timeout=0.3)
    try:
        fut.wait()
        raise AssertionError("no timeout")
    except RuntimeError as e:
        assert "RPC ran for more than" in str(e), e
    # timeout=0 means none.
    assert rpc.rpc_sync(peer, sleep_then, args=(0.05, 7), timeout=0) == 7

    # RRefs: remote, to_here, the proxy, owner -> user and user -> user.
    rref = rpc.remote(peer, torch.add, args=(torch.ones(2), 1))
    assert torch.equal(rref.to_here(), torch.full((2,), 2.0))
    counter = rpc.remote(peer, Counter, args=(10,))
    assert counter.rpc_sync().add(5) == 15
    assert counter.rpc_async().add(1).wait() == 16
    assert counter.remote().add(1).to_here() == 17
    other = "worker2" if world_size > 2 else "worker0"
    assert rpc.rpc_sync(other, rref_sum, args=(rref,)).item() == 4.0
    local = rpc.RRef(torch.ones(3))
    assert rpc.rpc_sync(peer, rref_sum, args=(local,)).item() == 3.0

    infos = rpc.api._get_current_rpc_agent().get_worker_infos()
    assert sorted((i.name, i.id) for i in infos) == [("worker%d" % r, r)
                                                     for r in range(world_size)]
    info = rpc.api._get_current_rpc_agent().get_debug_info()
    assert info["agent.backend"] == "FERRY", info
    assert info["ferry.transport.worker1"] in ("tcp", "shm"), info


def check_idle_cpu():
    # The default sleeping mode: a worker with nothing to do uses next to
    # nothing (busy_poll=True spins a thread instead, but how much of a core
    # a spinner gets depends on the machine's load, so that side is shown by
    # bench/torch_backend, not asserted here).
    wall0, cpu0 = time.monotonic(), time.process_time()
    time.sleep(0.5)
    share = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    assert share < 0.2, "an idle worker used %.0f%% of a core" % (share * 100)


def scenario_dead_peer(rank, world_size):
    # worker1 dies while serving a call; the call fails, it does not hang,
    # and calls to a live worker still work.
    start = time.monotonic()
    try:
        rpc.rpc_sync("worker1", die)
        raise AssertionError("a call to a dead worker returned")
    except RuntimeError as e:
        assert "worker1" in str(e) and "PEER_GONE" in str(e), e
    assert time.monotonic() - start < 30
    try:
        rpc.rpc_sync("worker1", torch.add, args=(torch.ones(1), 1))
        raise AssertionError("a call to a dead worker returned")
    except RuntimeError as e:
        assert "worker1" in str(e), e
    assert rpc.rpc_sync("worker2", torch.add, args=(torch.ones(1), 1)).item() == 2.0


def scenario_exit_without_shutdown(rank, world_size):
    if rank == 1:
        # An uncaught exception with a call in flight and RPC still up:
        # the process must exit with Python's status for it (1), neither
        # hang nor crash in teardown.
        rpc.rpc_async("worker0", sleep_then, args=(5, 1))
        raise RuntimeError("uncaught on purpose")
    # worker0 sees worker1 gone: a call to it fails, naming it.
    deadline = time.monotonic() + 30
    while True:
        try:
            rpc.rpc_sync("worker1", echo, args=(1,))
        except RuntimeError as e:
            assert "worker1" in str(e), e
            break
        assert time.monotonic() < deadline, "worker1 still answers 30 s after it raised"
    rpc.shutdown(graceful=False)


def main():
    scenario, rank, world_size, init_method, transport = sys.argv[1:6]
    rank, world_size = int(rank), int(world_size)
    transport, busy_poll, _ = transport.partition("+busy")  # "shm+busy": busy_poll=True
    options = ferry.torch.FerryRpcBackendOptions(transport=transport, init_method=init_method,
                                                 rpc_timeout=20, peer_timeout=2,
                                                 busy_poll=bool(busy_poll))
    rpc.init_rpc("worker%d" % rank, backend=rpc.BackendType.FERRY, rank=rank,
                 world_size=world_size, rpc_backend_options=options)
    if scenario == "calls":
        if rank == 0:
            scenario_calls(rank, world_size)
            if not busy_poll:
                check_idle_cpu()
        rpc.shutdown()
    elif scenario == "exit_without_shutdown":
        scenario_exit_without_shutdown(rank, world_size)
    elif scenario == "dead_peer":
        if rank == 0:
            scenario_dead_peer(rank, world_size)
            # The dead worker can never reach the shutdown barrier.
            rpc.shutdown(graceful=False)
        elif rank == 2:
            # Serves worker0's calls; the test closes stdin once worker0
            # exited, and this one leaves without the barrier.
            sys.stdin.read()
            rpc.shutdown(graceful=False)
        else:
            # worker1: serves die(), which ends the process.
            time.sleep(600)
    print("OK", scenario, flush=True)


if __name__ == "__main__":
    main()
