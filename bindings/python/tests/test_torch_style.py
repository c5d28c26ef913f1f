"""torch.distributed.rpc programs on `import ferry as rpc` (issue 27).

The canonical program and the torch-style examples run as real processes,
launched both ways torch programs are: with --rank/--world-size arguments,
and torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment). Then the pieces one by one: static jobs (WorkerInfo.id is the
rank, the shutdown barrier serves calls, its timeout names who did not
arrive, unknown names fail at once), torch's options and backends, futures.
"""

import os
import socket
import subprocess
import sys
import time
import warnings

import pytest

import ferry
import remote_fns as fns

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "..", "examples", "python", "torch_style")
BACKEND = os.environ.get("FERRY_TEST_BACKEND", "tcp")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(program, world_size, how, timeout=90, port=None, extra_env=None):
    """Runs `program` as world_size processes, launched `how` ("args" or
    "env"), and returns their outputs by rank; every one must exit 0."""
    port = port or free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, MASTER_ADDR="localhost", MASTER_PORT=str(port),
                   **(extra_env or {}))
        env.pop("RANK", None)
        env.pop("WORLD_SIZE", None)
        argv = [sys.executable, program]
        if how == "args":
            argv += ["--rank", str(rank), "--world-size", str(world_size)]
        else:
            env.update(RANK=str(rank), WORLD_SIZE=str(world_size))
        procs.append(subprocess.Popen(argv, env=env, cwd=os.path.dirname(program),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = []
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, "rank %d of %s exited %s:\n%s" % (
            rank, os.path.basename(program), p.returncode, out)
    return outputs


LAUNCHES = ["args", "env"]


@pytest.mark.parametrize("how", LAUNCHES)
def test_the_canonical_torch_program(how):
    """3 workers, rank 0 calls the others, everyone calls shutdown(): all
    succeed (before static jobs, ranks 1 and 2 left at once and rank 0
    failed with PeerGoneError)."""
    outs = launch(os.path.join(HERE, "torch_canonical.py"), 3, how)
    for rank, out in enumerate(outs):
        assert "rank %d OK" % rank in out, out


def test_the_canonical_program_beside_torchruns_agent_store():
    """torchrun's agent hosts torch's TCPStore at MASTER_ADDR:MASTER_PORT
    (TORCHELASTIC_USE_AGENT_STORE=True): ferry's rank 0 hosts its store on
    another port and tells the others through torch's store."""
    torch_dist = pytest.importorskip("torch.distributed")
    from datetime import timedelta

    port = free_port()
    agent_store = torch_dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=60),
                                      wait_for_workers=False)
    outs = launch(os.path.join(HERE, "torch_canonical.py"), 3, "env", port=port,
                  extra_env={"TORCHELASTIC_USE_AGENT_STORE": "True",
                             "TORCHELASTIC_RESTART_COUNT": "0"})
    for rank, out in enumerate(outs):
        assert "rank %d OK" % rank in out, out
    assert agent_store.get("/worker/attempt_0/ferry/store").decode().startswith("127.0.0.1:")


@pytest.mark.parametrize("how", LAUNCHES)
def test_parameter_server_example(how):
    pytest.importorskip("torch")
    outs = launch(os.path.join(EXAMPLES, "parameter_server.py"), 3, how)
    assert "parameter server OK" in outs[0], outs[0]
    assert "trainer1: last loss" in outs[0] and "trainer2: last loss" in outs[0]
    assert all("done" in out for out in outs), outs


@pytest.mark.parametrize("how", LAUNCHES)
def test_rl_agent_example(how):
    pytest.importorskip("torch")
    outs = launch(os.path.join(EXAMPLES, "rl_agent.py"), 3, how)
    assert "rl agent OK" in outs[0], outs[0]
    assert "observer1 done" in outs[1] and "observer2 done" in outs[2]


@pytest.mark.parametrize("how", LAUNCHES)
def test_model_parallel_example(how):
    pytest.importorskip("torch")
    outs = launch(os.path.join(EXAMPLES, "model_parallel.py"), 3, how)
    assert "model parallel OK" in outs[0], outs[0]
    assert "worker1 done" in outs[1] and "worker2 done" in outs[2]


PROGRAMS = {
    "torch_canonical.py": (HERE, "rank 0 OK"),
    "parameter_server.py": (EXAMPLES, "parameter server OK"),
    "rl_agent.py": (EXAMPLES, "rl agent OK"),
    "model_parallel.py": (EXAMPLES, "model parallel OK"),
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_programs_are_torch_programs(program, tmp_path):
    """Each program, its ferry import line put back to torch's, runs on
    torch.distributed.rpc itself: they are torch programs, not ferry ones
    that look alike."""
    pytest.importorskip("torch.distributed.rpc")
    where, ok = PROGRAMS[program]
    with open(os.path.join(where, program)) as f:
        lines = f.read().splitlines(keepends=True)
    changed = []
    for i, line in enumerate(lines):
        if line.startswith("import ferry as rpc"):
            lines[i] = "import torch.distributed.rpc as rpc\n"
        elif line.startswith("from ferry import"):
            lines[i] = line.replace("from ferry import", "from torch.distributed.rpc import")
        else:
            continue
        changed.append(i)
    assert len(changed) == 1, "%s has %d ferry lines" % (program, len(changed))
    copy = tmp_path / program
    copy.write_text("".join(lines))
    outs = launch(str(copy), 3, "args", extra_env={"PYTHONPATH": ""})  # no ferry there
    assert ok in outs[0], outs[0]


# ---- a static job of two: this process is rank 0 ------------------------------

PEER = """
import os, sys
import ferry as rpc
rpc.init_rpc("worker1", rank=1, world_size=2, backend=sys.argv[1])
print("READY", flush=True)
if sys.argv[2] == "wait-stdin":
    sys.stdin.read()
try:
    rpc.shutdown()
    print("SHUTDOWN OK", flush=True)
except rpc.FerryError as e:
    print("SHUTDOWN FAILED", type(e).__name__, e, flush=True)
"""


def start_peer(port, mode):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return subprocess.Popen([sys.executable, "-c", PEER, BACKEND, mode], env=env, cwd=HERE,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def pair(monkeypatch):
    """rank 0 here, rank 1 a process that calls shutdown() at once and so
    serves us from inside the barrier until we reach it too."""
    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    peer = start_peer(port, "at-once")
    ferry.init_rpc("worker0", rank=0, world_size=2, backend=BACKEND)
    yield peer
    ferry.shutdown()
    out = peer.communicate(timeout=30)[0]
    assert peer.returncode == 0 and "SHUTDOWN OK" in out, out


def test_static_job_ids_are_ranks_and_workerinfo_is_torchs(pair):
    me, peer = ferry.get_worker_info(), ferry.get_worker_info("worker1")
    assert (me.name, me.id, peer.name, peer.id) == ("worker0", 0, "worker1", 1)
    assert me == ferry.get_worker_info("worker0") and me != peer
    assert len({me, peer, ferry.get_worker_info("worker1")}) == 2
    # A worker by rank, by WorkerInfo and by name; worker1 is inside its
    # shutdown() barrier and still serves.
    assert ferry.rpc_sync(1, fns.whoami) == "worker1"
    assert ferry.rpc_sync(peer, fns.add, args=(1, 2)) == 3
    assert ferry.rpc_async("worker1", fns.add, args=None, kwargs={"a": 1, "b": 1}).wait() == 2
    assert ferry.rpc_sync(0, fns.add, args=(2, 2)) == 4  # this worker itself, by rank


def test_rref_torch_api_in_a_static_job(pair):
    rref = ferry.remote("worker1", fns.Counter, timeout=10)
    assert rref.owner() == ferry.get_worker_info("worker1") and rref.owner().id == 1
    assert rref.owner_name() == "worker1" and not rref.is_owner()
    assert rref.rpc_sync(timeout=10).increment(2) == 2
    assert rref.rpc_async(timeout=10).increment(3).wait() == 5
    assert rref.remote(timeout=10).increment(1).to_here(timeout=10) == 6
    assert rref.to_here(timeout=10).value == 6
    assert rref.confirmed_by_owner()
    assert rref._get_type() is fns.Counter
    assert rref._get_type(blocking=False).wait() is fns.Counter
    local = ferry.RRef([1, 2], type_hint=list)
    assert local.is_owner() and local.local_value() == [1, 2] and local.owner().id == 0


def test_unknown_worker_fails_at_once_in_a_static_job(pair):
    start = time.monotonic()
    with pytest.raises(ferry.NotFoundError, match="nobody"):
        ferry.rpc_sync("nobody", fns.whoami, timeout=20)
    assert time.monotonic() - start < 5, "a static job waited for an unknown name"


def test_shutdown_timeout_names_who_did_not_arrive(monkeypatch):
    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    peer = start_peer(port, "wait-stdin")
    try:
        ferry.init_rpc("worker0", rank=0, world_size=2, backend=BACKEND)
        assert peer.stdout.readline().strip() == "READY"
        start = time.monotonic()
        with pytest.raises(ferry.DeadlineExceededError, match="worker1"):
            ferry.shutdown(timeout=1.0)
        assert time.monotonic() - start < 10
        with pytest.raises(ferry.NotInitializedError):
            ferry.rpc_sync("worker1", fns.whoami)  # this worker has left either way
    finally:
        ferry.shutdown()
        out = peer.communicate("", timeout=30)[0]
    # Rank 0 arrived, then left at its timeout: rank 1's barrier ends
    # either way (it hangs in neither case).
    assert "SHUTDOWN OK" in out or "SHUTDOWN FAILED" in out, out


def test_non_graceful_shutdown_leaves_at_once(monkeypatch):
    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    peer = start_peer(port, "wait-stdin")
    try:
        ferry.init_rpc("worker0", rank=0, world_size=2, backend=BACKEND)
        assert peer.stdout.readline().strip() == "READY"
        start = time.monotonic()
        ferry.shutdown(graceful=False)
        assert time.monotonic() - start < 5
    finally:
        out = peer.communicate("", timeout=30)[0]
    # The peer's barrier can no longer complete: it fails at once (naming
    # worker0, or the store worker0 hosted).
    assert "SHUTDOWN FAILED PeerGoneError" in out, out


# ---- torch's options, backends and init methods --------------------------------

def test_init_method_tcp_and_torch_backend_options(monkeypatch):
    torch_rpc = pytest.importorskip("torch.distributed.rpc")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    port = free_port()
    opts = torch_rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=4, rpc_timeout=20, init_method="tcp://localhost:%d" % port)
    ferry.init_rpc("solo", backend=torch_rpc.BackendType.TENSORPIPE, rank=0, world_size=1,
                   rpc_backend_options=opts)
    try:
        assert ferry.store_address() == "127.0.0.1:%d" % port
        assert ferry.get_worker_info().id == 0
    finally:
        ferry.shutdown()


def test_ferry_options_without_torch_and_what_is_ignored(monkeypatch):
    port = free_port()
    opts = ferry.TensorPipeRpcBackendOptions(
        rpc_timeout=5, init_method="tcp://127.0.0.1:%d" % port,
        device_maps={"peer": {0: 1}}, _transports=["uv"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ferry.init_rpc("solo", backend=ferry.BackendType.TENSORPIPE, rank=0, world_size=1,
                       rpc_backend_options=opts)
    try:
        assert any("device_maps" in str(w.message) for w in seen), [str(w) for w in seen]
        assert ferry.get_worker_info().transport in ("self", "")
    finally:
        ferry.shutdown()


def test_bad_torch_arguments_are_clear_errors(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.delenv("FERRY_STORE", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        ferry.init_rpc("x", rank=0, world_size=2)
    with pytest.raises(ValueError, match="rank"):
        ferry.init_rpc("x", rank=2, world_size=2, rpc_backend_options=ferry.RpcBackendOptions(
            init_method="tcp://127.0.0.1:1"))
    with pytest.raises(ValueError, match="file://"):
        ferry.init_rpc("x", rank=0, world_size=1, rpc_backend_options=ferry.RpcBackendOptions(
            init_method="file:///tmp/x"))
    with pytest.raises(TypeError, match="RpcBackendOptions"):
        ferry.init_rpc("x", rank=0, world_size=1, rpc_backend_options={"rpc_timeout": 1})


def test_torch_is_never_imported_for_a_numpy_program():
    code = """
import sys, ferry, ferry.futures
f = ferry.Future(); f.set_result(1)
assert ferry.futures.wait_all([f]) == [1]
ferry.init_rpc("solo", rank=0, world_size=1,
               rpc_backend_options=ferry.TensorPipeRpcBackendOptions(
                   init_method="tcp://127.0.0.1:%d"))
ferry.shutdown()
assert "torch" not in sys.modules, "ferry imported torch"
print("NO TORCH")
""" % free_port()
    out = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True,
                         text=True, timeout=60)
    assert "NO TORCH" in out.stdout, out.stdout + out.stderr


# ---- futures --------------------------------------------------------------------

def test_futures_behave_like_torchs():
    a, b = ferry.Future(), ferry.Future()
    chained = a.then(lambda f: f.value() * 10)
    seen = []
    b.add_done_callback(lambda f: seen.append("b"))
    both = ferry.futures.collect_all([a, b])
    assert not both.done() and not a.done()
    a.set_result(4)
    b.set_exception(ValueError("boom"))
    assert chained.wait() == 40 and seen == ["b"]
    assert both.wait() == [a, b] and a.value() == 4
    with pytest.raises(ValueError, match="boom"):
        b.wait()
    with pytest.raises(ValueError, match="boom"):
        ferry.futures.wait_all([a, b])
    with pytest.raises(RuntimeError):
        a.set_result(5)  # completed once, as torch's
    assert ferry.futures.Future is ferry.Future


def test_futures_mix_with_torch_futures():
    torch = pytest.importorskip("torch")
    t, f = torch.futures.Future(), ferry.Future()
    both = ferry.futures.collect_all([t, f])
    t.set_result(1)
    f.set_result(2)
    assert [x.wait() for x in both.wait()] == [1, 2]
    assert ferry.futures.wait_all([t, f]) == [1, 2]


def test_backends_map_to_ferry_transports():
    from ferry import _options

    assert _options.transport(None, None) is None  # FERRY_TRANSPORT, else auto
    assert _options.transport(ferry.BackendType.TENSORPIPE, None) is None
    assert _options.transport("shm", None) == "shm"
    assert _options.transport(ferry.BackendType.TCP, None) == "tcp"
    opts = ferry.TensorPipeRpcBackendOptions(_transports=["shm", "uv"])
    assert _options.transport(None, opts) == "shm,tcp"
    assert _options.transport(ferry.BackendType.FABRIC, opts) == "fabric"  # named wins
    with pytest.raises(TypeError, match="BackendType"):
        _options.transport(3, None)
    torch_rpc = pytest.importorskip("torch.distributed.rpc")
    assert _options.transport(torch_rpc.BackendType.TENSORPIPE, None) is None
