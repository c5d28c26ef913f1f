"""Fixtures: the test process is the job's first worker (it hosts the
store); Cluster starts real worker processes (worker_main.py) that join it."""

import os
import subprocess
import sys

import pytest

import ferry

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = os.environ.get("FERRY_TEST_BACKEND", "tcp")


class Cluster:
    def __init__(self, driver_name="driver", backend=None):
        self.backend = backend or BACKEND
        ferry.init_rpc(driver_name, backend=self.backend, store="127.0.0.1:0", host_store=True,
                       peer_timeout=2.0)
        self.store = ferry.store_address()
        self.procs = {}

    def start(self, name, wait=True, env=None):
        """Starts worker `name`; `env`: variables to add to its environment."""
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "worker_main.py"), name,
                              self.store, self.backend],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE, text=True,
                             env=dict(os.environ, **(env or {})))
        self.procs[name] = p
        if wait:
            line = p.stdout.readline()
            assert line.strip() == "READY", "worker %s failed to start: %r" % (name, line)
        return p

    def kill(self, name):
        p = self.procs.pop(name)
        p.kill()
        p.wait()

    def stop(self, name):
        """Asks a worker to leave gracefully and waits for its exit."""
        p = self.procs.pop(name)
        p.stdin.close()
        assert p.wait(timeout=30) == 0

    def close(self):
        for name in list(self.procs):
            p = self.procs.pop(name)
            try:
                p.stdin.close()
                p.wait(timeout=30)
            except Exception:
                p.kill()
                p.wait()
        ferry.shutdown()


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    c.start("w1")
    c.start("w2")
    yield c
    c.close()


@pytest.fixture(scope="module")
def cpp_worker(cluster):
    """A worker written in C++ (core/tests/test_worker_main.cc): its
    functions are registered by name in C++."""
    exe = os.environ.get("FERRY_TEST_WORKER")
    if not exe:
        pytest.skip("FERRY_TEST_WORKER (the ferry-test-worker binary) not set")
    p = subprocess.Popen([exe, "--name", "cpp", "--store", cluster.store, "--transport", BACKEND],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("READY"), line
    yield "cpp"
    p.stdin.close()
    p.wait(timeout=30)
