"""ferry: distributed RPC with torch.distributed.rpc's programming model.

    import ferry
    ferry.init_rpc("trainer", backend="auto", store="127.0.0.1:29500")
    fut = ferry.rpc_async("ps", update, args=(grad,), timeout=5.0)
    rref = ferry.remote("ps", Model, args=(cfg,))
    out = rref.rpc_sync().forward(batch)
    ferry.shutdown()

A torch.distributed.rpc program runs with `import ferry as rpc` in place of
`import torch.distributed.rpc as rpc` (static jobs: rank, world_size,
MASTER_ADDR / MASTER_PORT, shutdown() as a job-wide barrier).
See docs/python.md: the API side by side with torch.distributed.rpc.
"""

# numpy before the _ferry extension: with the extension loaded first (built
# with pybind11 3.1), a later `import torch` (2.11, pybind11 3.0) crashed in
# torch's own import on a GPU machine; numpy first, it did not. ferry needs
# numpy anyway (received host tensors are numpy arrays).
import numpy  # noqa: F401  (import order; see above)

from . import functions, futures
from ._options import BackendType, RpcBackendOptions, TensorPipeRpcBackendOptions
from ._agent import (CurrentCall, Raw, WorkerInfo, current_call, debug_dump, get_worker_info,
                     init_rpc, is_available, on_join, on_leave, on_membership, register, remote,
                     rpc_async, rpc_sync, shutdown, stats, store_address, wait_for_workers,
                     workers)
from ._errors import (AuthenticationError, CancelledError, DeadlineExceededError, FerryError,
                      InvalidArgumentError, NotFoundError, NotInitializedError, PeerGoneError,
                      RemoteExitError, ReplyDecodeError)
from ._future import Future
from ._pickling import zero_copy
from ._rref import RRef
from . import _agent

_agent._bind(RRef)

__all__ = [
    "init_rpc", "shutdown", "rpc_sync", "rpc_async", "remote", "register",
    "get_worker_info", "is_available", "workers", "wait_for_workers", "on_membership",
    "on_join", "on_leave", "current_call", "CurrentCall",
    "zero_copy",
    "stats", "debug_dump", "store_address", "WorkerInfo", "RRef", "Future", "Raw", "functions",
    "futures",
    "BackendType", "RpcBackendOptions", "TensorPipeRpcBackendOptions",
    "FerryError", "PeerGoneError", "DeadlineExceededError", "NotFoundError",
    "InvalidArgumentError", "CancelledError", "NotInitializedError", "AuthenticationError",
    "RemoteExitError", "ReplyDecodeError",
]
