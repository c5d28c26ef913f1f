"""What a torch.distributed.rpc program passes to init_rpc, read as ferry's
options: `backend` (torch's BackendType, or a ferry plugin name),
`rpc_backend_options` (ferry's RpcBackendOptions / TensorPipeRpcBackendOptions,
or torch's own instances: they are read by attribute, torch is never
imported here), `init_method` (env:// or tcp://host:port) and torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""

import enum
import os
import socket
import warnings
from urllib.parse import parse_qs, urlparse

DEFAULT_INIT_METHOD = "env://"
DEFAULT_RPC_TIMEOUT_SEC = 60.0  # torch's, for options objects made without one
DEFAULT_NUM_WORKER_THREADS = 16  # torch's


class BackendType(enum.Enum):
    """torch.distributed.rpc.BackendType, plus ferry's transports by name.
    TENSORPIPE (torch's only one) means ferry's default: FERRY_TRANSPORT,
    else "auto" (every plugin found; per peer the best one both workers
    share: shm on one host, tcp across hosts)."""

    TENSORPIPE = "tensorpipe"
    AUTO = "auto"
    TCP = "tcp"
    SHM = "shm"
    FABRIC = "fabric"
    CUDA_IPC = "cuda_ipc"


class RpcBackendOptions:
    """torch.distributed.rpc.RpcBackendOptions: `rpc_timeout` (seconds, the
    default of every call; 0 = no limit) and `init_method` (where the
    rendezvous store is: "env://" = MASTER_ADDR:MASTER_PORT, or
    "tcp://host:port")."""

    def __init__(self, rpc_timeout=DEFAULT_RPC_TIMEOUT_SEC, init_method=DEFAULT_INIT_METHOD):
        self.rpc_timeout = rpc_timeout
        self.init_method = init_method

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % (k, v) for k, v in vars(self).items() if v not in (None, {}, [])))


class TensorPipeRpcBackendOptions(RpcBackendOptions):
    """torch.distributed.rpc.TensorPipeRpcBackendOptions, without torch.

    num_worker_threads: threads that run incoming Python functions
    (ferry's `executor_threads`). device_maps / devices: accepted and
    ignored (ferry sends a CUDA tensor to the callee's GPU of the same
    index and has no device map; a warning says so once). _transports:
    TensorPipe's transport names, mapped to ferry's plugins ("uv" -> tcp,
    "shm" -> shm, "ibv" -> fabric) in preference order. _channels: ignored.
    """

    def __init__(self, *, num_worker_threads=DEFAULT_NUM_WORKER_THREADS,
                 rpc_timeout=DEFAULT_RPC_TIMEOUT_SEC, init_method=DEFAULT_INIT_METHOD,
                 device_maps=None, devices=None, _transports=None, _channels=None):
        super().__init__(rpc_timeout, init_method)
        self.num_worker_threads = num_worker_threads
        self.device_maps = {k: dict(v) for k, v in (device_maps or {}).items()}
        self.devices = list(devices or [])
        self._transports = _transports
        self._channels = _channels

    def set_device_map(self, to, device_map):
        self.device_maps.setdefault(to, {}).update(device_map)

    def set_devices(self, devices):
        self.devices = list(devices)


_TENSORPIPE_TRANSPORTS = {"uv": "tcp", "shm": "shm", "ibv": "fabric", "cma": "shm",
                          "xth": "shm"}


def transport(backend, options):
    """The ferry plugin list a backend (and options' _transports) asks for,
    or None: ferry's default (FERRY_TRANSPORT, else "auto")."""
    wanted = None
    if backend is not None:
        name = getattr(backend, "name", None)
        if isinstance(backend, str):
            wanted = None if backend.lower() == "tensorpipe" else backend
        elif isinstance(backend, BackendType):
            wanted = None if backend.value == "tensorpipe" else backend.value
        elif name is not None and type(backend).__name__ == "BackendType":
            # torch's BackendType (a dynamic Enum): TENSORPIPE is all it has
            # unless a program registered its own backend, which ferry is not.
            if name != "TENSORPIPE":
                raise ValueError("ferry: backend %s is a torch backend ferry does not "
                                 "provide; pass BackendType.TENSORPIPE (ferry picks its "
                                 "transports) or a ferry plugin name" % name)
        else:
            raise TypeError("ferry: backend is a BackendType or a ferry plugin name "
                            "(\"tcp\", \"shm\", \"fabric\", \"auto\"), not %r" % (backend,))
    tp = getattr(options, "_transports", None) if options is not None else None
    if tp and wanted is None:
        mapped = []
        for t in tp:
            p = _TENSORPIPE_TRANSPORTS.get(str(t), str(t))
            if p not in mapped:
                mapped.append(p)
        wanted = ",".join(mapped)
    return wanted


_warned = set()


def busy_poll(value):
    """A worker's busy_poll: the value given, else FERRY_BUSY_POLL ("1": on)."""
    return bool(value if value is not None else os.environ.get("FERRY_BUSY_POLL", "0") == "1")


def _warn_once(key, text):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(text, stacklevel=4)


def read(options):
    """(rpc_timeout or None, num_worker_threads or None, init_method or None)
    from an options object, ferry's or torch's (read by attribute)."""
    if options is None:
        return None, None, None
    if not hasattr(options, "rpc_timeout") or not hasattr(options, "init_method"):
        raise TypeError("ferry: rpc_backend_options is an RpcBackendOptions (ferry's or "
                        "torch's), not %s" % type(options).__name__)
    if getattr(options, "device_maps", None) or getattr(options, "devices", None):
        _warn_once("device_maps",
                   "ferry: rpc_backend_options' device_maps/devices are ignored: ferry has "
                   "no device map; a CUDA tensor arrives on the callee's GPU of the same "
                   "index, and its result on ours (docs/python.md, Device tensors)")
    if getattr(options, "_channels", None):
        _warn_once("channels", "ferry: rpc_backend_options' _channels are ignored (TensorPipe "
                               "channels; ferry's transports move tensors themselves)")
    threads = getattr(options, "num_worker_threads", None)
    return float(options.rpc_timeout), threads, options.init_method


class Rendezvous:
    """Where the store is and what torchrun's environment says about ranks:
    `store` ("host:port", or "" for FERRY_STORE), `rank`, `world_size`."""

    def __init__(self, store, rank, world_size):
        self.store, self.rank, self.world_size = store, rank, world_size


def rendezvous(init_method, store, rank, world_size):
    """Resolves the store address, the rank and the world size.

    The store: an explicit ferry `store=` ("host:port"); else init_method
    "tcp://host:port"; else (env://, the default) FERRY_STORE (read by the
    C layer), else MASTER_ADDR:MASTER_PORT. Rank and world size: the
    arguments; else init_method's ?rank=&world_size=; else RANK and
    WORLD_SIZE as torchrun sets them (the C API's rule). world_size=0 given
    explicitly: an elastic job whatever the environment says."""
    if rank is None:
        rank = -1
    url = urlparse(init_method or DEFAULT_INIT_METHOD)
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    if rank < 0:
        rank = int(query.get("rank", os.environ.get("RANK") or -1))
    if world_size is None:
        world_size = int(query.get("world_size", os.environ.get("WORLD_SIZE") or 0))
    if store is not None:
        return Rendezvous(store, rank, world_size)
    if url.scheme == "env":
        if os.environ.get("FERRY_STORE"):
            return Rendezvous("", rank, world_size)  # the C layer reads it
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not addr or not port:
            if world_size:
                missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
                raise ValueError(
                    "ferry: init_method env:// needs %s in the environment (the address "
                    "of the rendezvous store, which rank 0 hosts), or FERRY_STORE=host:port, "
                    "or init_method=\"tcp://host:port\"" % " and ".join(missing))
            return Rendezvous("", rank, world_size)
        if world_size and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            return Rendezvous(_agent_store_rendezvous(addr, port, rank, world_size),
                              rank, world_size)
        return Rendezvous(_host_port(addr, port), rank, world_size)
    if url.scheme == "tcp":
        if not url.hostname or not url.port:
            raise ValueError("ferry: init_method %r names no host:port" % init_method)
        return Rendezvous(_host_port(url.hostname, url.port), rank, world_size)
    raise ValueError("ferry: init_method %r is not supported: use \"env://\" "
                     "(MASTER_ADDR / MASTER_PORT) or \"tcp://host:port\"" % init_method)


def _agent_store_rendezvous(addr, port, rank, world_size, timeout_s=300):
    """Under torchrun, MASTER_ADDR:MASTER_PORT is torch's own TCPStore,
    hosted by torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True), so
    ferry's store cannot listen there: rank 0 picks a free port on
    MASTER_ADDR for it and publishes the address in the agent's store
    (under the restart's prefix, as torch's env:// does), where the other
    ranks read it. torchrun means torch is installed; it is imported only
    here."""
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = PrefixStore("/worker/attempt_%s/ferry" % attempt,
                        TCPStore(addr, int(port), world_size, False,
                                 timedelta(seconds=timeout_s)))
    if rank == 0:
        host = _host_port(addr, port).rsplit(":", 1)[0]
        with socket.socket() as s:
            s.bind((host, 0))
            address = "%s:%d" % (host, s.getsockname()[1])
        store.set("store", address)
        return address
    return store.get("store").decode()


def _host_port(host, port):
    """host:port with a host name resolved to an address (the store and the
    transports take numeric addresses)."""
    try:
        port = int(port)
    except ValueError:
        raise ValueError("ferry: the store port %r is not a number" % (port,)) from None
    try:
        socket.inet_pton(socket.AF_INET, host)
        return "%s:%d" % (host, port)
    except OSError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ValueError("ferry: cannot resolve the store host %r: %s" % (host, e)) from None
    return "%s:%d" % (infos[0][4][0], port)
