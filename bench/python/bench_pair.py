"""Runs one side-by-side benchmark system as two processes on this machine,
a caller and a callee, and returns what the caller measured.

Both Python benchmarks against torch use it (bench/python/rpc_vs_torch.py,
bench/cuda_ipc/bench_torch.py): each re-runs its own script with
`--role caller` / `--role callee`, and the caller prints one line
`RESULT <json>` when it is done."""

import json
import socket
import subprocess
import sys


class PairFailed(Exception):
    """The caller failed or ran out of time; the message says which."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pair(name, caller_cmd, callee_cmd, timeout):
    """Starts both commands (each gets `--role ...` appended), waits for the
    caller at most `timeout` seconds and returns its RESULT as a dict."""
    caller = subprocess.Popen(caller_cmd + ["--role", "caller"], stdout=subprocess.PIPE,
                              text=True)
    # For ferry the caller hosts the store; the callee retries its join until it listens.
    callee = subprocess.Popen(callee_cmd + ["--role", "callee"])
    try:
        out, _ = caller.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        caller.kill()
        callee.kill()
        raise PairFailed("timed out after %d s" % timeout)
    try:
        callee.wait(timeout=30)
    except subprocess.TimeoutExpired:
        callee.kill()  # the caller's figures stand; the callee's shutdown hung
        print("%s: the callee did not exit within 30 s of the caller; killed" % name,
              file=sys.stderr)
    if caller.returncode != 0:
        callee.kill()
        raise PairFailed("caller exited %d (its stderr is above)" % caller.returncode)
    line = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])
