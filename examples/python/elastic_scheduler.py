#!/usr/bin/env python3
"""A scheduler handing jobs to workers that come and go.

The pattern of ../../../shared/reference/user-questions-elastic-rpc.txt:
one stateful scheduler splits work into jobs; stateless workers join
whenever they start, pull a job, run it and report the result. Nobody
waits for workers that have not arrived; a worker that leaves or dies
does not stop the others, and the jobs it held are handed to someone
else (the scheduler learns of the death from ferry's membership events).

This launcher starts one worker and kills it in the middle of a job; two
more workers join later, one after the other, and every job still
completes exactly once.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/elastic_scheduler.py
"""

import argparse
import collections
import os
import signal
import subprocess
import sys
import threading

import ferry


class Scheduler:
    def __init__(self, jobs):
        self.lock = threading.Condition()
        self.todo = collections.deque(range(jobs))
        self.running = {}  # job -> worker name
        self.results = {}
        self.total = jobs
        self.reassigned = 0

    def next_job(self, worker):
        with self.lock:
            if not self.todo:
                return None if len(self.results) == self.total else -1  # -1: ask again
            job = self.todo.popleft()
            self.running[job] = worker
            return job

    def report(self, job, result):
        with self.lock:
            if self.running.pop(job, None) is not None:
                self.results[job] = result
            self.lock.notify_all()

    def worker_left(self, info, event):
        if event == "joined":
            print("scheduler: %s joined" % info.name, flush=True)
            return
        with self.lock:
            lost = [j for j, w in self.running.items() if w == info.name]
            for j in lost:
                del self.running[j]
                self.todo.appendleft(j)
            self.reassigned += len(lost)
        print("scheduler: %s %s; jobs handed back: %s" % (info.name, event, lost), flush=True)

    def wait_all(self, timeout):
        with self.lock:
            return self.lock.wait_for(lambda: len(self.results) == self.total, timeout)


_sched = None


def next_job(worker):
    return _sched.next_job(worker)


def report(job, result):
    _sched.report(job, result)


def work(job):
    """The job itself: something to compute (and, for job 5, a moment during
    which the launcher kills the worker holding it)."""
    if job == 5:
        print("JOB5", flush=True)
        threading.Event().wait(2.0)  # gives the launcher its moment
    return sum(i * i for i in range(job * 1000))


def run_worker(name, store):
    ferry.init_rpc(name, store=store)
    while True:
        job = ferry.rpc_sync("scheduler", next_job, args=(name,))
        if job is None:
            break
        if job == -1:
            threading.Event().wait(0.05)  # nothing free right now: poll the queue again
            continue
        ferry.rpc_sync("scheduler", report, args=(job, work(job)))
    ferry.shutdown()


def main():
    global _sched
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--worker")  # internal
    p.add_argument("--store")
    a = p.parse_args()
    if a.worker:
        run_worker(a.worker, a.store)
        return
    _sched = Scheduler(a.jobs)
    ferry.init_rpc("scheduler", store="127.0.0.1:0", host_store=True, peer_timeout=2.0)
    ferry.on_membership(_sched.worker_left)
    store = ferry.store_address()

    def start(name):
        return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", name,
                                 "--store", store], stdout=subprocess.PIPE, text=True)

    victim = start("w-victim")
    # Kill the victim while it holds job 5 (it prints JOB5 when it starts it).
    for line in victim.stdout:
        if line.strip() == "JOB5":
            victim.send_signal(signal.SIGKILL)
            break
    others = [start("w1"), start("w2")]  # join long after the job started
    ok = _sched.wait_all(timeout=120)
    for pr in others:
        pr.wait(timeout=60)
    victim.wait()
    correct = all(_sched.results[j] == sum(i * i for i in range(j * 1000)) for j in _sched.results)
    print("scheduler: %d/%d jobs done, %d handed back after a worker died"
          % (len(_sched.results), a.jobs, _sched.reassigned))
    ferry.shutdown()
    if not ok or not correct or _sched.reassigned < 1:
        sys.exit("elastic scheduler example FAILED")
    print("elastic scheduler example OK")


if __name__ == "__main__":
    main()
