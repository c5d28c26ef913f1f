"""Resource limits from Python (docs/limits.md): set with
init_rpc(limits=...) or a FERRY_MAX_* variable in a worker's environment;
at a limit a call waits for room within its deadline, or fails with
FerryError (code RESOURCE_EXHAUSTED) naming the limit. Real worker
processes."""

import os
import subprocess
import sys
import time

import pytest

import ferry
import limit_fns
from conftest import BACKEND, HERE
from ferry._errors import RESOURCE_EXHAUSTED


def test_an_unknown_limit_is_refused_before_the_worker_starts():
    with pytest.raises(ValueError, match="max_queued_calls"):
        ferry.init_rpc("driver", backend=BACKEND, store="127.0.0.1:0", host_store=True,
                       limits={"max_queue": 3})
    with pytest.raises(ValueError, match="positive whole number"):
        ferry.init_rpc("driver", backend=BACKEND, store="127.0.0.1:0", host_store=True,
                       limits={"max_queued_calls": -1})


@pytest.fixture(scope="module")
def job():
    """This process (1 MiB messages, 2 calls in flight per peer) hosts the
    job; w1 takes at most 8 queued calls (FERRY_MAX_QUEUED_CALLS), w2
    relays and floods."""
    ferry.init_rpc("driver", backend=BACKEND, store="127.0.0.1:0", host_store=True,
                   peer_timeout=2.0,
                   limits={"max_message_size": 1 << 20, "max_calls_in_flight_per_peer": 2})
    procs = []
    for name, env in (("w1", {"FERRY_MAX_QUEUED_CALLS": "8"}), ("w2", {})):
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "worker_main.py"), name,
                              ferry.store_address(), BACKEND],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE,
                             text=True, env=dict(os.environ, **env))
        procs.append(p)
        assert p.stdout.readline().strip() == "READY"
    yield
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)
    ferry.shutdown()


def test_a_message_over_the_size_limit_fails_before_it_is_sent(job):
    with pytest.raises(ferry.FerryError) as e:
        ferry.rpc_sync("w1", limit_fns.wait_gate, args=(b"x" * (2 << 20),))
    assert e.value.code == RESOURCE_EXHAUSTED
    assert "max_message_size (1048576" in str(e.value), str(e.value)
    assert "FERRY_MAX_MESSAGE_SIZE" in str(e.value)


def test_a_call_waits_for_room_within_its_deadline(job):
    held = [ferry.rpc_async("w1", limit_fns.wait_gate, args=(30,)) for _ in range(2)]
    began = time.monotonic()
    with pytest.raises(ferry.DeadlineExceededError) as e:
        ferry.rpc_async("w1", limit_fns.wait_gate, args=(30,), timeout=0.3).wait()
    assert time.monotonic() - began >= 0.25, "it did not wait for room"
    assert "max_calls_in_flight_per_peer (2" in str(e.value), str(e.value)
    ferry.rpc_sync("w2", limit_fns.release_on, args=("w1",))
    assert [f.wait() for f in held] == [True, True]
    assert ferry.rpc_sync("w1", limit_fns.wait_gate, args=(0,)) is True


def test_a_flood_beyond_the_callees_queue_is_refused_by_name(job, tmp_path):
    ok, refused, other, first = ferry.rpc_sync(
        "w2", limit_fns.flood, args=("w1", 400, str(tmp_path / "gate"), 30), timeout=120)
    assert other == 0
    assert ok + refused == 400
    assert refused >= 200
    assert "max_queued_calls (8" in first and "FERRY_MAX_QUEUED_CALLS" in first, first
