#!/usr/bin/env python3
"""A parameter server with trainers, written as a torch.distributed.rpc
program; `import ferry as rpc` is its only ferry line.

Rank 0 is the parameter server: it holds a small linear model behind an
RRef and starts a training loop on every trainer (ranks 1..N-1). Each
trainer fetches the current weights through the RRef's proxy, computes a
gradient on its own batches with torch's (local) autograd, and sends it to
the server's `update`, an async_execution function: the server answers all
trainers of a round at once, when the last gradient of the round is in,
with a torch Future, so no server thread waits meanwhile.

    python3 parameter_server.py --rank R --world-size N     # one process per rank
    RANK=R WORLD_SIZE=N python3 parameter_server.py          # as torchrun starts it

MASTER_ADDR / MASTER_PORT default to localhost:29500.
"""

import argparse
import os
import threading

import torch
import torch.nn as nn

import ferry as rpc  # torch: import torch.distributed.rpc as rpc

IN, OUT = 6, 2
ROUNDS = 40
BATCH = 32
TRUE_W = torch.arange(IN * OUT, dtype=torch.float32).reshape(OUT, IN) / 10.0


class ParameterServer:
    def __init__(self, num_trainers, lr=0.1):
        self.model = nn.Linear(IN, OUT, bias=False)
        nn.init.zeros_(self.model.weight)
        self.num_trainers, self.lr = num_trainers, lr
        self.lock = threading.Lock()
        self.grads = []
        self.waiting = torch.futures.Future()
        self.rounds = 0

    def get_weights(self):
        return self.model.weight.detach().clone()

    @staticmethod
    @rpc.functions.async_execution
    def update(ps_rref, grad):
        """Adds one trainer's gradient; the returned Future is answered with
        the new weights once the round's last gradient arrived."""
        self = ps_rref.local_value()
        with self.lock:
            self.grads.append(grad)
            fut = self.waiting
            if len(self.grads) == self.num_trainers:
                with torch.no_grad():
                    self.model.weight -= self.lr * torch.stack(self.grads).mean(0)
                self.grads, self.rounds = [], self.rounds + 1
                self.waiting = torch.futures.Future()
                fut.set_result(self.get_weights())
        return fut


def run_trainer(ps_rref, seed):
    """The training loop of one trainer, run on it by rank 0's call."""
    torch.manual_seed(seed)
    model = nn.Linear(IN, OUT, bias=False)
    with torch.no_grad():
        model.weight.copy_(ps_rref.rpc_sync().get_weights())
    for _ in range(ROUNDS):
        x = torch.randn(BATCH, IN)
        y = x @ TRUE_W.t()
        model.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        new_weights = rpc.rpc_sync(ps_rref.owner(), ParameterServer.update,
                                   args=(ps_rref, model.weight.grad))
        with torch.no_grad():
            model.weight.copy_(new_weights)
    return rpc.get_worker_info().name, float(loss)


def run_server(world_size):
    ps = ParameterServer(num_trainers=world_size - 1)
    ps_rref = rpc.RRef(ps)
    futs = [rpc.rpc_async(f"trainer{r}", run_trainer, args=(ps_rref, r))
            for r in range(1, world_size)]
    losses = [fut.wait() for fut in futs]
    err = float((ps.get_weights() - TRUE_W).abs().max())
    for name, loss in losses:
        print(f"{name}: last loss {loss:.5f}")
    print(f"server: {ps.rounds} rounds, max weight error {err:.5f}")
    assert ps.rounds == ROUNDS and err < 0.05, (ps.rounds, err)
    print("parameter server OK")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--world-size", type=int, default=None)
    a = p.parse_args()
    rank = a.rank if a.rank is not None else int(os.environ["RANK"])
    world_size = a.world_size if a.world_size is not None else int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29500")
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=60)
    name = "ps" if rank == 0 else f"trainer{rank}"
    rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    if rank == 0:
        run_server(world_size)
    rpc.shutdown()  # waits for every worker, as torch's does
    print(f"{name} done")


if __name__ == "__main__":
    main()
