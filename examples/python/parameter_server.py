#!/usr/bin/env python3
"""A parameter server with several trainers (torch.distributed.rpc's
classic pattern, on ferry).

The server holds a linear model. Each trainer repeatedly fetches the
weights, computes a gradient on its own synthetic batch, and sends it to
the server. The server's update function is an async_execution function:
it answers every trainer of a round together, once all their gradients
are in and the model is updated (batched synchronous SGD), so no server
thread is parked while it waits.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/parameter_server.py
"""

import argparse
import os
import subprocess
import sys
import threading

import torch

import ferry

FEATURES = 8
TRUE_W = torch.arange(1.0, FEATURES + 1)  # what training should find


class ParameterServer:
    def __init__(self, trainers, lr=0.05):
        self.w = torch.zeros(FEATURES)
        self.trainers, self.lr = trainers, lr
        self.lock = threading.Lock()
        self.grads = []
        self.waiting = []  # futures of this round's callers
        self.rounds = 0

    def weights(self):
        return self.w

    def push(self, grad):
        """Adds a gradient; returns a Future answered with the new weights
        once every trainer's gradient of this round is in."""
        fut = ferry.Future()
        with self.lock:
            self.grads.append(grad)
            self.waiting.append(fut)
            if len(self.grads) < self.trainers:
                return fut
            self.w -= self.lr * torch.stack(self.grads).mean(0)
            self.rounds += 1
            done, self.grads, self.waiting = self.waiting, [], []
        for f in done:
            f.set_result(self.w.clone())
        return fut


_server = None


def make_server(trainers):
    global _server
    _server = ParameterServer(trainers)


@ferry.functions.async_execution
def push(grad):
    return _server.push(grad)


def get_weights():
    return _server.weights()


def server_rounds():
    return _server.rounds


def train(name, steps):
    g = torch.Generator().manual_seed(hash(name) % 1000)
    w = ferry.rpc_sync("ps", get_weights)
    for _ in range(steps):
        x = torch.randn(64, FEATURES, generator=g)
        y = x @ TRUE_W
        w = w.clone().requires_grad_()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        w = ferry.rpc_sync("ps", push, args=(w.grad,))
    return float(loss)


def run_trainer(name, store, steps):
    ferry.init_rpc(name, store=store)
    loss = train(name, steps)
    print("%s: final loss %.4f" % (name, loss), flush=True)
    ferry.shutdown()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainers", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--backend", default="auto")
    p.add_argument("--trainer")  # internal: run as this trainer
    p.add_argument("--store")
    a = p.parse_args()
    if a.trainer:
        run_trainer(a.trainer, a.store, a.steps)
        return
    # This process is the parameter server and hosts the job's store.
    ferry.init_rpc("ps", backend=a.backend, store="127.0.0.1:0", host_store=True)
    make_server(a.trainers)
    store = ferry.store_address()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--trainer",
                               "trainer%d" % i, "--store", store, "--steps", str(a.steps)])
             for i in range(a.trainers)]
    codes = [pr.wait() for pr in procs]
    err = float((_server.w - TRUE_W).abs().max())
    print("ps: %d rounds, max weight error %.4f" % (_server.rounds, err))
    ferry.shutdown()
    if any(codes) or _server.rounds != a.steps or err > 0.05:
        sys.exit("parameter server example FAILED")
    print("parameter server example OK")


if __name__ == "__main__":
    main()
