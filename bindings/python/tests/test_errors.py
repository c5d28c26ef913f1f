"""Errors say what happened: remote exceptions keep their type and args
(never ending the caller's process), a reply that cannot be decoded names
its call, a call reaching a leaving worker gets PeerGoneError, and joining
fails (or warns) with words that say what to do. Real worker processes."""

import errno
import os
import socket
import subprocess
import sys
import threading
import time
import traceback

import pytest

import error_fns
import ferry
from conftest import BACKEND, HERE


def _raised(fn, *args, **kwargs):
    """The exception fn raised, whatever its kind (a SystemExit re-raised
    here must fail the test, not end pytest)."""
    try:
        fn(*args, **kwargs)
    except BaseException as e:  # noqa: B036
        return e
    raise AssertionError("no exception")


def _start(cluster, name, extra_path=None):
    """A worker process (worker_main.py) joining the cluster's job."""
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), extra_path) if p)
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "worker_main.py"), name,
                          cluster.store, BACKEND],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE, text=True,
                         env=env)
    cluster.procs[name] = p
    assert p.stdout.readline().strip() == "READY"
    return p


# ---- remote exceptions --------------------------------------------------------

def test_remote_system_exit_and_keyboard_interrupt_are_ferry_errors(cluster):
    e = _raised(ferry.rpc_sync, "w1", error_fns.exit_with, args=(3,))
    assert isinstance(e, ferry.RemoteExitError), repr(e)
    assert isinstance(e, ferry.FerryError) and not isinstance(e, SystemExit)
    assert e.remote_type == "SystemExit" and e.remote_args == (3,)
    assert "SystemExit" in str(e) and "w1" in str(e)
    assert "exit_with" in e.remote_traceback

    e = _raised(lambda: ferry.rpc_async("w1", error_fns.interrupt).wait())
    assert isinstance(e, ferry.RemoteExitError), repr(e)
    assert e.remote_type == "KeyboardInterrupt" and e.remote_args == ("stop right there",)

    rref = ferry.remote("w1", error_fns.exit_with, args=(4,))
    assert isinstance(_raised(rref.to_here), ferry.RemoteExitError)
    # The callee lives on, and so does this process.
    assert ferry.rpc_sync("w1", max, args=(1, 2)) == 2


def test_remote_exceptions_keep_their_args(cluster):
    e = _raised(ferry.rpc_sync, "w1", error_fns.key_error, args=("the key",))
    assert type(e) is KeyError and e.args == ("the key",)

    path = "/nonexistent-%d/file" % os.getpid()
    e = _raised(ferry.rpc_sync, "w2", error_fns.open_missing, args=(path,))
    assert type(e) is FileNotFoundError
    assert e.errno == errno.ENOENT and e.filename == path

    e = _raised(lambda: ferry.rpc_async("w1", error_fns.value_error, args=("a", 2)).wait())
    assert type(e) is ValueError and e.args == ("a", 2)

    e = _raised(ferry.rpc_sync, "w1", error_fns.raise_detailed)
    assert type(e) is error_fns.Detailed and e.args == ("bad", 42)
    assert e.detail == 42 and e.seen == "on the callee"


def test_the_remote_traceback_is_an_attribute_and_printed_not_in_args(cluster):
    e = _raised(ferry.rpc_sync, "w1", error_fns.value_error, args=("bad input 42",))
    assert e.args == ("bad input 42",) and str(e) == "bad input 42"
    assert "w1" in e.remote_traceback and "error_fns.py" in e.remote_traceback
    assert "Traceback" in e.remote_traceback
    printed = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    assert "error_fns.py" in printed and "value_error" in printed


def test_exceptions_that_cannot_cross_still_name_their_type_and_message(cluster, tmp_path):
    e = _raised(ferry.rpc_sync, "w1", error_fns.raise_locked)
    assert type(e) is ferry.FerryError, repr(e)
    assert "error_fns.Locked" in str(e) and "holds a lock" in str(e)
    assert "pickled" in str(e) and "raise_locked" in e.remote_traceback

    e = _raised(ferry.rpc_sync, "w1", error_fns.raise_mismatched)
    assert type(e) is ferry.FerryError, repr(e)
    assert "error_fns.Mismatched" in str(e) and "1 and 2" in str(e)
    assert "unpickled" in str(e)

    (tmp_path / "callee_only.py").write_text(
        "class CalleeOnlyError(Exception):\n    pass\n\n"
        "class Thing:\n    def __init__(self, n):\n        self.n = n\n")
    _start(cluster, "private", str(tmp_path))
    e = _raised(ferry.rpc_sync, "private", error_fns.raise_callee_only)
    assert type(e) is ferry.FerryError, repr(e)
    assert "callee_only.CalleeOnlyError" in str(e) and "only the callee knows" in str(e)


def test_a_reply_that_cannot_be_decoded_names_its_call(cluster, tmp_path):
    (tmp_path / "callee_only.py").write_text(
        "class Thing:\n    def __init__(self, n):\n        self.n = n\n")
    if "private2" not in cluster.procs:
        _start(cluster, "private2", str(tmp_path))
    for wait in (lambda: ferry.rpc_sync("private2", error_fns.make_callee_only),
                 lambda: ferry.rpc_async("private2", error_fns.make_callee_only).wait()):
        e = _raised(wait)
        assert isinstance(e, ferry.ReplyDecodeError), repr(e)
        assert "'private2'" in str(e) and "error_fns.make_callee_only" in str(e)
        assert "while decoding the reply" in str(e) and "callee_only" in str(e)
        assert e.worker == "private2" and isinstance(e.__cause__, ImportError)
    rref = ferry.remote("private2", error_fns.make_callee_only)
    e = _raised(rref.to_here)
    assert isinstance(e, ferry.ReplyDecodeError) and "to_here" in str(e)


# ---- a worker that is leaving -------------------------------------------------

def test_a_call_reaching_a_leaving_worker_is_peer_gone(cluster, tmp_path):
    import remote_fns

    p = _start(cluster, "leaver")
    started, release = str(tmp_path / "started"), str(tmp_path / "release")
    held = ferry.rpc_async("leaver", error_fns.hold, args=(started, release, 60))
    deadline = time.monotonic() + 20
    while not os.path.exists(started):
        assert time.monotonic() < deadline, "the held call never started"
        time.sleep(0.01)
    # It starts a graceful shutdown: it serves `hold` to the end, and every
    # call that reaches it meanwhile is answered at once.
    ferry.rpc_sync("leaver", remote_fns.stop)
    failure = None
    while failure is None and time.monotonic() < deadline:
        try:
            ferry.rpc_sync("leaver", max, args=(1, 2), timeout=5)
        except BaseException as e:  # noqa: B036
            failure = e
    assert isinstance(failure, ferry.PeerGoneError), repr(failure)
    assert failure.code == ferry._errors.PEER_GONE
    assert str(failure).startswith("worker 'leaver' left the job"), str(failure)
    assert held.done() is False  # still leaving: the held call runs on
    open(release, "w").close()
    assert held.wait(20) == "held"
    cluster.procs.pop("leaver")
    assert p.wait(timeout=30) == 0
    # Once it left: the same error.
    e = _raised(ferry.rpc_sync, "leaver", max, args=(1, 2), timeout=2)
    assert isinstance(e, (ferry.PeerGoneError, ferry.NotFoundError)), repr(e)


def test_calls_racing_a_leave_all_fail_with_peer_gone(cluster):
    """Calls in flight while a worker leaves, whatever the timing: each one
    succeeds or fails with PeerGoneError (never UNAVAILABLE, CANCELLED or a
    plain FerryError)."""
    import remote_fns

    p = _start(cluster, "racer")
    stop = threading.Event()
    outcomes = []

    def hammer():
        futures = []
        while not stop.is_set():
            futures.append(ferry.rpc_async("racer", remote_fns.slow_add, args=(1, 2, 0.001),
                                           timeout=10))
            time.sleep(0.0005)
        for f in futures:
            try:
                outcomes.append(f.wait())
            except BaseException as e:  # noqa: B036
                outcomes.append(e)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    ferry.rpc_async("racer", remote_fns.stop)
    cluster.procs.pop("racer")
    assert p.wait(timeout=30) == 0
    time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    failures = [o for o in outcomes if o != 3]
    assert failures and len(failures) < len(outcomes), "the race was not run"
    wrong = [repr(e) for e in failures if not isinstance(e, ferry.PeerGoneError)]
    assert not wrong, "%d of %d failures: %s" % (len(wrong), len(failures), wrong[:3])
    assert all("racer" in str(e) or "connection" in str(e) for e in failures)


# ---- joining ------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_joiner(code, env_extra=None):
    """Runs `code` in a fresh interpreter; returns (stdout, [(seconds since
    start, stderr line)], exit status)."""
    env = dict(os.environ, FERRY_LOG_LEVEL="warn", **(env_extra or {}))
    start = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=HERE, text=True, env=env)
    lines = []
    reader = threading.Thread(
        target=lambda: [lines.append((time.monotonic() - start, line)) for line in p.stderr])
    reader.start()
    out = p.stdout.read()
    rc = p.wait(timeout=60)
    reader.join()
    return out, lines, rc


def test_an_unreachable_store_says_nobody_hosts_it_within_seconds():
    port = _free_port()
    out, lines, rc = _run_joiner(
        "import sys, time, ferry\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    ferry.init_rpc('lonely', backend=%r, store='127.0.0.1:%d', join_timeout=6)\n"
        "except ferry.FerryError as e:\n"
        "    print(type(e).__name__, round(time.monotonic() - t, 1), e)\n"
        "    sys.exit(3)\n" % (BACKEND, port))
    assert rc == 3, (out, lines)
    early = [(t, line) for t, line in lines if "nobody seems to host" in line]
    assert early, lines
    t, line = early[0]
    assert t < 5, "said only after %.1f s" % t  # the join timeout is 6 s
    for text in (line, out):
        assert "127.0.0.1:%d" % port in text
        assert "host_store=True" in text and "rank 0" in text
    assert "Still trying" in line
    assert "nobody seems to host" in out


def test_a_wrong_secret_is_an_authentication_error(cluster):
    start = time.monotonic()
    out, lines, rc = _run_joiner(
        "import sys, ferry\n"
        "try:\n"
        "    ferry.init_rpc('intruder', backend=%r, store=%r, secret='not-the-job-secret',\n"
        "                   join_timeout=20)\n"
        "except ferry.FerryError as e:\n"
        "    print(type(e).__name__, e.code, isinstance(e, ferry.AuthenticationError), e)\n"
        "    sys.exit(3)\n" % (BACKEND, cluster.store))
    assert rc == 3, (out, lines)
    kind, code, is_auth, message = out.split(" ", 3)
    assert kind == "AuthenticationError" and is_auth == "True", out
    assert int(code) == ferry._errors.UNAUTHENTICATED
    assert "secret" in message
    assert time.monotonic() - start < 15  # refused, not retried until the timeout


_HOST = (
    "import sys, ferry\n"
    "ferry.init_rpc('host', backend=%r, store='127.0.0.1:0', host_store=True)\n"
    "print(ferry.store_address(), flush=True)\n"
    "sys.stdin.readline()\n"
    "ferry.shutdown()\n" % BACKEND)

_JOINER = (
    "import sys, threading, time, ferry\n"
    "left = threading.Event()\n"
    "ferry.on_leave(lambda info: info.name == 'host' and left.set())\n"
    "ferry.init_rpc('joiner', backend=%r, store=sys.argv[1])\n"
    "print('READY', flush=True)\n"
    "left.wait(5)  # a killed host may never be announced: its store died with it\n"
    "time.sleep(0.5)  # the store's connection closes after the news\n"
    "print('SAW', flush=True)\n"
    "ferry.shutdown()\n" % BACKEND)


@pytest.mark.parametrize("how", ["leaves", "is killed"])
def test_the_store_hosts_normal_leave_is_not_a_warning(how):
    host = subprocess.Popen([sys.executable, "-c", _HOST], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=HERE, text=True)
    try:
        store = host.stdout.readline().strip()
        joiner = subprocess.Popen([sys.executable, "-c", _JOINER, store],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=HERE,
                                  text=True, env=dict(os.environ, FERRY_LOG_LEVEL="warn"))
        assert joiner.stdout.readline().strip() == "READY"
        if how == "leaves":
            host.stdin.close()
            assert host.wait(timeout=30) == 0
        else:
            host.kill()
            host.wait()
        out, err = joiner.communicate(timeout=60)
        assert joiner.returncode == 0 and "SAW" in out, (out, err)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    warned = [line for line in err.splitlines()
              if line.startswith("[ferry warn") and "rendezvous store" in line]
    if how == "leaves":
        assert not warned, err
    else:
        assert warned, err  # a death still is one
