"""The canonical torch.distributed.rpc program (issue 27), with only the
import changed: rank 0 calls every other worker, everyone calls shutdown().

    python3 torch_canonical.py --rank R --world-size N      # arguments
    RANK=R WORLD_SIZE=N python3 torch_canonical.py          # torchrun's env

MASTER_ADDR / MASTER_PORT come from the environment either way. Prints
"rank R OK" once its shutdown() returned.
"""

import argparse
import os

import ferry as rpc  # the only line changed from a torch program


def square_plus(x, rank):
    return x * x + rank


def whoami():
    info = rpc.get_worker_info()
    return info.name, info.id


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int)
    p.add_argument("--world-size", type=int)
    a = p.parse_args()
    if a.rank is None:  # torchrun: init_rpc reads RANK and WORLD_SIZE itself
        rank = int(os.environ["RANK"])
        rpc.init_rpc(f"worker{rank}")
    else:
        rank = a.rank
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=a.world_size)
    world_size = a.world_size or int(os.environ["WORLD_SIZE"])
    me = rpc.get_worker_info()
    assert (me.name, me.id) == (f"worker{rank}", rank), me
    if rank == 0:
        for r in range(1, world_size):
            assert rpc.rpc_sync(f"worker{r}", square_plus, args=(3, r)) == 9 + r
            assert rpc.rpc_async(f"worker{r}", whoami).wait() == (f"worker{r}", r)
            assert rpc.remote(f"worker{r}", square_plus, args=(2, r)).to_here() == 4 + r
            assert rpc.rpc_sync(r, whoami) == (f"worker{r}", r)  # by rank, as torch's id
    rpc.shutdown()
    print(f"rank {rank} OK", flush=True)


if __name__ == "__main__":
    main()
