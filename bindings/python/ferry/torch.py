"""ferry as a torch.distributed.rpc backend: `import ferry.torch` registers
the backend "FERRY", and every torch RPC program (rpc_sync, rpc_async,
remote, RRefs, distributed autograd, RemoteModule, the distributed
optimizer) runs over ferry's transports with only the backend changed:

    import ferry.torch
    import torch.distributed.rpc as rpc

    rpc.init_rpc("worker0", rank=0, world_size=2,
                 backend=rpc.BackendType.FERRY,
                 rpc_backend_options=ferry.torch.FerryRpcBackendOptions(transport="shm"))

The agent is C++ (bindings/torch, a torch RpcAgent over ferry's C API);
this module builds it from torch's init_rpc arguments. Written for torch
1.13 (docs/torch-backend.md: what passes, and what a newer torch needs).
"""

import atexit
import os
import secrets
import socket
import sys
from datetime import timedelta

import torch.distributed.rpc as rpc
from torch.distributed.rpc import backend_registry
from torch.distributed.rpc import constants as rpc_constants

from . import _ferry_torch
from . import _options
from ._options import _host_port

__all__ = ["FerryRpcBackendOptions", "FerryAgent", "BACKEND_NAME", "TRANSPORTS"]

BACKEND_NAME = "FERRY"
# The transports a job names: "auto" picks, per peer, the best one both
# workers load (shm on one host, fabric where libfabric has a provider,
# else tcp). A comma list ("shm,tcp") is a preference order.
TRANSPORTS = ("auto", "tcp", "shm", "fabric")

FerryAgent = _ferry_torch.FerryAgent


class FerryRpcBackendOptions(rpc.RpcBackendOptions):
    """Options of the FERRY backend.

    rpc_timeout, init_method: as every torch backend's (seconds; init_method
    is where torch's own store is, used for the rendezvous below).
    transport: "auto", "tcp", "shm", "fabric", or a comma list of them.
    store: ferry's rendezvous store, "host:port". None: rank 0 hosts it on
    a free port of MASTER_ADDR (127.0.0.1 without it) and the other ranks
    learn the address through torch's store.
    num_worker_threads: the agent's thread pool (serves requests, completes
    replies), as TensorPipe's option of that name.
    peer_timeout: seconds of heartbeat silence after which a peer counts as
    dead (its pending calls fail); None = ferry's default (3 s).
    start_timeout: seconds init_rpc waits for every rank (None: 5 minutes).
    zero_copy: tensors are sent from their own memory, as TensorPipe sends
    them (do not write an argument until its future is done); False: a copy
    taken when the call is made travels instead.
    busy_poll: ferry's progress thread spins between messages instead of
    sleeping, as TensorPipe's shared-memory transport does: lower latency
    when every worker has a core to spare, much higher when the cores are
    oversubscribed. None: the FERRY_BUSY_POLL environment variable ("1"),
    else off.
    """

    def __init__(self, *, transport="auto", store=None,
                 rpc_timeout=rpc_constants.DEFAULT_RPC_TIMEOUT_SEC,
                 init_method=rpc_constants.DEFAULT_INIT_METHOD,
                 num_worker_threads=rpc_constants.DEFAULT_NUM_WORKER_THREADS,
                 peer_timeout=None, start_timeout=None, job=None, zero_copy=True,
                 busy_poll=None):
        super().__init__(rpc_timeout, init_method)
        names = [t.strip() for t in str(transport).split(",")]
        unknown = [t for t in names if t not in TRANSPORTS]
        if not names or unknown:
            raise ValueError("FERRY backend: unknown transport %r (choose from %s, or a comma "
                             "list of them)" % (transport, ", ".join(TRANSPORTS)))
        if num_worker_threads < 1:
            raise ValueError("FERRY backend: num_worker_threads must be at least 1")
        self.transport = ",".join(names)
        self.store = store
        self.num_worker_threads = int(num_worker_threads)
        self.peer_timeout = peer_timeout
        self.start_timeout = start_timeout
        self.job = job
        self.zero_copy = bool(zero_copy)
        self.busy_poll = _options.busy_poll(busy_poll)

    def __repr__(self):
        return ("FerryRpcBackendOptions(transport=%r, store=%r, rpc_timeout=%r, "
                "num_worker_threads=%r)" % (self.transport, self.store, self.rpc_timeout,
                                           self.num_worker_threads))


def _construct_options(rpc_timeout, init_method,
                       num_worker_threads=rpc_constants.DEFAULT_NUM_WORKER_THREADS,
                       _transports=None, _channels=None, **kwargs):
    # _transports / _channels are TensorPipe's; ignored so that code written
    # for TENSORPIPE's options constructs these unchanged.
    return FerryRpcBackendOptions(rpc_timeout=rpc_timeout, init_method=init_method,
                                  num_worker_threads=num_worker_threads, **kwargs)


def _ms(seconds):
    return timedelta(0) if seconds is None else timedelta(seconds=seconds)


def _rendezvous(store, rank, options):
    """ferry's store address and the job's secret, agreed through torch's
    store: rank 0 chooses them (a free port, a random secret), the others
    read them. The secret authenticates every ferry connection of the job.
    Returns (address, secret, placeholder): rank 0's socket that holds the
    chosen port until ferry's store listens on it (close it after), else
    None."""
    if rank == 0:
        address, placeholder = options.store, None
        if address is None:
            host = _host_port(os.environ.get("MASTER_ADDR", "127.0.0.1"), 0).rsplit(":", 1)[0]
            # The port stays bound (SO_REUSEADDR, not listening) until
            # ferry's store, which binds with SO_REUSEADDR too, listens on
            # it: a port found free and closed at once could be taken by
            # another process before the store binds it, and init_rpc would
            # fail with "address already in use".
            placeholder = socket.socket()
            placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            placeholder.bind((host, 0))
            address = "%s:%d" % (host, placeholder.getsockname()[1])
        secret = secrets.token_hex(16)
        store.set("ferry/store", address)
        store.set("ferry/secret", secret)
        return address, secret, placeholder
    return store.get("ferry/store").decode(), store.get("ferry/secret").decode(), None


def _check_unique_name(store, name, rank, world_size):
    """Refuses a job in which two ranks chose one name. ferry reads a name joining again as
    the same worker restarted (a new incarnation), so the static job would
    wait for the rank it replaced instead of failing: the names are
    compared through torch's store first, as TensorPipe's agent does."""
    store.set("ferry/name/%d" % rank, name)
    keys = ["ferry/name/%d" % r for r in range(world_size)]
    store.wait(keys)
    names = [store.get(k).decode() for k in keys]
    for n in sorted(set(names)):
        ranks = [r for r, other in enumerate(names) if other == n]
        if len(ranks) > 1:  # every rank refuses, not only those two
            raise RuntimeError("RPC worker name %r is not unique: ranks %s chose it"
                               % (n, ", ".join(map(str, ranks))))


def _init_backend(store, name, rank, world_size, rpc_backend_options):
    options = rpc_backend_options
    if not isinstance(options, FerryRpcBackendOptions):
        raise TypeError("`rpc_backend_options` must be a `FerryRpcBackendOptions`, not %s"
                        % type(options).__name__)
    if not world_size:
        raise RuntimeError("FERRY backend: init_rpc needs a world_size (a static job); "
                           "dynamic groups are not supported")
    _check_unique_name(store, name, rank, world_size)
    address, secret, placeholder = _rendezvous(store, rank, options)
    o = _ferry_torch.FerryAgentOptions()
    o.transport = options.transport
    o.store = address
    o.host_store = rank == 0 and options.store is None
    o.secret = secret
    o.job = options.job or "torch-rpc"
    o.rpc_timeout_s = options.rpc_timeout
    o.num_worker_threads = options.num_worker_threads
    o.peer_timeout = _ms(options.peer_timeout)
    o.start_timeout = _ms(options.start_timeout)
    o.zero_copy = options.zero_copy
    o.busy_poll = options.busy_poll
    try:
        agent = FerryAgent(name, rank, world_size, o)
    finally:
        if placeholder is not None:
            placeholder.close()
    # Every rank has registered its handler before any init_rpc returns, so
    # no request can reach a worker that does not serve yet.
    store.set("ferry/ready/%d" % rank, "1")
    store.wait(["ferry/ready/%d" % r for r in range(world_size)])
    return agent


@atexit.register
def _leave_at_exit():
    """A process that exits with RPC still up (an uncaught exception, or
    sys.exit without rpc.shutdown()) leaves the job here, as if it had
    died: its peers see it gone. Done while the interpreter and ferry's
    libraries are whole: left to the destructor of torch's process-wide
    agent pointer, the agent is torn down during the process's static
    destruction with its threads still running, and such exits aborted
    (heap corruption) or hung until killed."""
    if not rpc.api._is_current_rpc_agent_set():
        return
    if not isinstance(rpc.api._get_current_rpc_agent(), FerryAgent):
        return
    try:
        rpc.shutdown(graceful=False)
    except Exception as e:  # exiting anyway: say what was lost, do not mask the exit
        print("ferry.torch: RPC was still up at exit; leaving the job reported: %s" % e,
              file=sys.stderr)


if not backend_registry.backend_registered(BACKEND_NAME):
    backend_registry.register_backend(BACKEND_NAME, _construct_options, _init_backend)
    # register_backend rebuilds the BackendType enum in backend_registry
    # only; torch.distributed.rpc keeps the old one, whose members (its
    # default TENSORPIPE included) init_rpc would then refuse. Both names
    # see the new enum.
    rpc.BackendType = backend_registry.BackendType
