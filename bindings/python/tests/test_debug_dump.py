"""The debug dump of a deliberately hung job (docs/debugging.md), from
Python: ferry.debug_dump() in the driver, and SIGUSR1 to real worker
processes, which write their dumps under FERRY_DEBUG_DIR."""

import glob
import json
import os
import signal
import time

import pytest

import ferry
import hang_fns as hf
from conftest import Cluster


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    """driver -> w1.relay -> w2.hang, which blocks until released."""
    dump_dir = str(tmp_path_factory.mktemp("dumps"))
    c = Cluster()
    c.start("w1", env={"FERRY_DEBUG_DIR": dump_dir})
    c.start("w2", env={"FERRY_DEBUG_DIR": dump_dir})
    fut = ferry.rpc_async("w1", hf.relay, args=("w2",), timeout=60)
    assert ferry.rpc_sync("w2", hf.wait_started, args=(10,))
    yield c, dump_dir
    ferry.rpc_sync("w2", hf.release)
    assert fut.wait() is True
    c.close()


def blocked_on(dump, words):
    return any(words in line for line in dump["blocked_on"])


def signal_dump(cluster, dump_dir, name):
    """Sends SIGUSR1 to worker `name` and returns the dump it writes."""
    pid = cluster.procs[name].pid
    # ferry-dump.<job>.<worker>.<pid>.json
    pattern = os.path.join(dump_dir, "ferry-dump.*.%s.%d.json" % (name, pid))
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for path in glob.glob(pattern):
            with open(path) as f:
                return json.load(f)
        time.sleep(0.02)
    raise AssertionError("no dump like %s; the directory has %s"
                         % (pattern, os.listdir(dump_dir)))


def test_the_driver_sees_its_pending_call(hung):
    dump = ferry.debug_dump()
    assert dump["worker"]["name"] == "driver"
    calls = dump["outgoing_calls"]
    assert [(c["to"], c["function"]) for c in calls] == [("w1", "ferry.py.call")]
    assert 0 < calls[0]["deadline_in_ms"] <= 60000
    assert blocked_on(dump, "a call to w1.ferry.py.call waits for its reply"), dump["blocked_on"]
    assert json.loads(ferry.debug_dump(as_text=True))["worker"]["name"] == "driver"


def test_sigusr1_names_the_nested_call_in_the_middle_worker(hung):
    cluster, dump_dir = hung
    dump = signal_dump(cluster, dump_dir, "w1")
    assert dump["worker"]["name"] == "w1"
    assert blocked_on(dump, "handler 'ferry.py.call' (called by 'driver') waits on its call "
                            "to w2.ferry.py.call"), dump["blocked_on"]


def test_sigusr1_names_the_handler_that_blocks(hung):
    cluster, dump_dir = hung
    dump = signal_dump(cluster, dump_dir, "w2")
    assert blocked_on(dump, "handler 'ferry.py.call' (called by 'w1') is running"), \
        dump["blocked_on"]
    # The worker survived the signal.
    assert ferry.rpc_sync("w2", hf.wait_started, args=(1,)) is True
