#!/usr/bin/env python3
"""A model split over workers with RRefs, written as a torch.distributed.rpc
program; `from ferry import ...` is its only ferry line.

Rank 0 (the master) builds a small network whose two halves live on
ranks 1 and 2: each half is created there with remote(), and the master
holds RRefs to them. A forward pass wraps the input in an RRef, asks the
first half for its output *as an RRef* (remote() through the shard's RRef
proxy: the activation stays on rank 1), and hands that RRef to the second
half, which fetches it straight from rank 1 (a user-to-user fork) and
returns the result to the master. Micro-batches go through the pipeline
concurrently (rpc_async proxies), and the master checks the outcome
against the same network run in one process, with parameters it fetched
through RRefs returned by the shards.

Training such a model needs distributed autograd, which ferry does not
offer; this program runs inference.

    python3 model_parallel.py --rank R --world-size 3     # one process per rank
    RANK=R WORLD_SIZE=3 python3 model_parallel.py          # as torchrun starts it

MASTER_ADDR / MASTER_PORT default to localhost:29500.
"""

import argparse
import os

import torch
import torch.nn as nn

# torch: from torch.distributed.rpc import ...
from ferry import RRef, WorkerInfo, get_worker_info, init_rpc, remote, shutdown

IN, HIDDEN, OUT = 16, 32, 4


class Shard1(nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU())
        self.calls = 0

    def forward(self, x_rref):
        self.calls += 1
        with torch.no_grad():
            return self.net(x_rref.to_here())

    def parameter_rrefs(self):
        return [RRef(p.detach()) for p in self.parameters()]

    def where(self):
        return get_worker_info().name

    def num_calls(self):
        return self.calls


class Shard2(nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))
        self.calls = 0

    def forward(self, h_rref):
        self.calls += 1
        with torch.no_grad():
            return self.net(h_rref.to_here(timeout=10))

    def parameter_rrefs(self):
        return [RRef(p.detach()) for p in self.parameters()]

    def where(self):
        return get_worker_info().name

    def num_calls(self):
        return self.calls


class DistNet:
    """The network, its halves on two workers."""

    def __init__(self, workers):
        self.shard1 = remote(workers[0], Shard1, args=(1,))
        self.shard2 = remote(workers[1], Shard2, args=(2,), timeout=30)

    def forward_async(self, x):
        h_rref = self.shard1.remote().forward(RRef(x))  # stays on the first worker
        return self.shard2.rpc_async().forward(h_rref)

    def parameter_rrefs(self):
        return (self.shard1.rpc_sync().parameter_rrefs()
                + self.shard2.rpc_sync().parameter_rrefs())


def local_replica(param_rrefs):
    """The same network in this process, with the shards' parameters."""
    net = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(),
                        nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))
    params = [p for p in net.parameters()]
    assert len(params) == len(param_rrefs)
    with torch.no_grad():
        for p, rref in zip(params, param_rrefs):
            p.copy_(rref.to_here())
    return net


def run_master():
    workers = [get_worker_info("worker1"), get_worker_info("worker2")]
    assert all(isinstance(w, WorkerInfo) for w in workers)
    assert workers[0] != workers[1] and len({*workers, workers[0]}) == 2
    model = DistNet(workers)
    assert model.shard1.owner() == workers[0] and model.shard2.owner_name() == "worker2"
    assert model.shard1.rpc_sync().where() == "worker1"

    torch.manual_seed(0)
    batch = torch.randn(64, IN)
    micro = batch.split(8)
    futs = [model.forward_async(x) for x in micro]  # the pipeline, all in flight
    out = torch.cat([fut.wait() for fut in futs])

    param_rrefs = model.parameter_rrefs()
    assert {r.owner_name() for r in param_rrefs} == {"worker1", "worker2"}
    with torch.no_grad():
        expected = local_replica(param_rrefs)(batch)
    err = float((out - expected).abs().max())
    assert model.shard1.rpc_sync().num_calls() == len(micro)
    print(f"master: {len(micro)} micro-batches through {workers[0].name} and "
          f"{workers[1].name}, output {tuple(out.shape)}, max error {err:.2e}")
    assert out.shape == (64, OUT) and err < 1e-5, err
    print("model parallel OK")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--world-size", type=int, default=None)
    a = p.parse_args()
    rank = a.rank if a.rank is not None else int(os.environ["RANK"])
    world_size = a.world_size if a.world_size is not None else int(os.environ["WORLD_SIZE"])
    assert world_size == 3, "the model has two halves: run three ranks"
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29500")
    name = "master" if rank == 0 else f"worker{rank}"
    init_rpc(name, rank=rank, world_size=world_size)
    if rank == 0:
        run_master()
    shutdown()
    print(f"{name} done")


if __name__ == "__main__":
    main()
