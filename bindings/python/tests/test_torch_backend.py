"""torch.distributed.rpc programs on the FERRY backend (import ferry.torch),
as real processes on tcp and on shm: calls, tensors, remote exceptions,
timeouts, RRefs, and a peer that dies mid-call (torch_backend_worker.py).
torch's own RPC suite runs against the backend in scripts/torch-rpc-suite.sh.
"""

import os
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")
try:
    import ferry.torch  # noqa: F401
except ImportError as e:  # built without libtorch-dev: say so, do not pass
    pytest.skip("the FERRY torch backend is not built here (%s)" % e, allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_backend_worker.py")


def start(scenario, world_size, transport, stdin_ranks=()):
    """Starts the scenario's processes; their stdout and stderr go to one
    pipe each."""
    init_file = tempfile.NamedTemporaryFile(prefix="ferry-torch-init-", delete=False)
    init_file.close()
    os.unlink(init_file.name)  # torch's FileStore creates it
    env = dict(os.environ, FERRY_LOG_LEVEL="error")
    procs = []
    for rank in range(world_size):
        procs.append(subprocess.Popen(
            [sys.executable, WORKER, scenario, str(rank), str(world_size),
             "file://" + init_file.name, transport],
            stdin=subprocess.PIPE if rank in stdin_ranks else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=HERE, env=env, text=True))
    return procs


def finish(procs, rank, timeout=120, close_stdin=False):
    """Waits for one process (closing its stdin first if asked); if it hangs, every process of the scenario is
    killed (a worker left alone would wait for its peers forever)."""
    try:
        out, _ = procs[rank].communicate(input="" if close_stdin else None, timeout=timeout)
    except subprocess.TimeoutExpired:
        outs = []
        for r, p in enumerate(procs):
            p.kill()
            outs.append("--- worker%d:\n%s" % (r, p.communicate()[0]))
        pytest.fail("worker%d hung; the outputs:\n%s" % (rank, "\n".join(outs)))
    return procs[rank].returncode, out


@pytest.fixture
def started():
    """start()'s processes, killed at the end if still running (a failed
    rank 0 leaves the others waiting for it in torch's shutdown)."""
    procs = []

    def _start(*args, **kwargs):
        procs.extend(start(*args, **kwargs))
        return procs

    yield _start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.communicate()


# "shm+busy": FerryRpcBackendOptions(busy_poll=True).
@pytest.mark.parametrize("transport", ["tcp", "shm", "shm+busy"])
def test_calls_tensors_errors_rrefs(started, transport):
    procs = started("calls", 3, transport)
    for rank in range(len(procs)):
        rc, out = finish(procs, rank)
        assert rc == 0 and out.rstrip().endswith("OK calls"), "worker%d:\n%s" % (rank, out)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_dead_peer_fails_calls_without_hanging(started, transport):
    procs = started("dead_peer", 3, transport, stdin_ranks=(2,))
    rc0, out0 = finish(procs, 0)
    rc1, out1 = finish(procs, 1)
    rc2, out2 = finish(procs, 2, close_stdin=True)
    assert rc0 == 0 and out0.rstrip().endswith("OK dead_peer"), out0
    assert rc1 == 17, "worker1 should have died in die(): rc %s\n%s" % (rc1, out1)
    assert rc2 == 0, out2


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_uncaught_exception_exits_without_hanging(started, transport):
    # A rank that raises with RPC still up (no rpc.shutdown()) exits with
    # Python's status for it, and its peer sees it gone.
    procs = started("exit_without_shutdown", 2, transport)
    rc1, out1 = finish(procs, 1, timeout=60)
    assert rc1 == 1 and "uncaught on purpose" in out1, "worker1: rc %s\n%s" % (rc1, out1)
    rc0, out0 = finish(procs, 0, timeout=60)
    assert rc0 == 0 and out0.rstrip().endswith("OK exit_without_shutdown"), out0


class _DictStore:
    def __init__(self):
        self.kv = {}

    def set(self, k, v):
        self.kv[k] = v.encode() if isinstance(v, str) else v

    def get(self, k):
        return self.kv[k]


def test_store_port_stays_reserved_until_the_store_listens():
    # Rank 0 chooses ferry's store port; until ferry listens on it no other
    # process may take it (a plain bind is refused), and ferry's own
    # listener (SO_REUSEADDR) may.
    import socket
    store = _DictStore()
    address, secret, placeholder = ferry.torch._rendezvous(
        store, 0, ferry.torch.FerryRpcBackendOptions())
    try:
        host, port = address.rsplit(":", 1)
        other = socket.socket()
        with pytest.raises(OSError):
            other.bind((host, int(port)))
        other.close()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, int(port)))
        listener.listen()
        listener.close()
        assert ferry.torch._rendezvous(store, 1, None) == (address, secret, None)
    finally:
        placeholder.close()


def test_options_are_checked():
    with pytest.raises(ValueError, match="unknown transport"):
        ferry.torch.FerryRpcBackendOptions(transport="carrier-pigeon")
    o = torch.distributed.rpc.backend_registry.construct_rpc_backend_options(
        torch.distributed.rpc.BackendType.FERRY, transport="shm,tcp", _transports=["uv"])
    assert isinstance(o, ferry.torch.FerryRpcBackendOptions) and o.transport == "shm,tcp"
    assert o.busy_poll == (os.environ.get("FERRY_BUSY_POLL", "0") == "1")
    assert ferry.torch.FerryRpcBackendOptions(busy_poll=True).busy_poll
