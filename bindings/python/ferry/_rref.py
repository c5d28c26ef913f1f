"""ferry.RRef: a remote reference, torch.distributed.rpc.RRef's interface.

The counting (owner and users, forks, guarantees G1 and G2, deletion when
no holder remains) is the core's (docs/protocol.md); this class adds the
Python view. On its owner, an RRef made by Python holds the live object
itself (not a pickled copy): local_value() returns that object, and a
method called through rref.rpc_sync().method() mutates it in place. A user
fetching it (to_here) asks the owner for a pickled copy of the object as it
is now.
"""

from . import _agent, _ferry
from ._future import Future

HELD = _agent.HELD


class RRef:
    def __init__(self, value=None, type_hint=None, *, _handle=None, _py=True):
        """RRef(value) wraps a local value as an RRef this worker owns.
        type_hint (torch's, for TorchScript) is accepted and not needed."""
        del type_hint
        if _handle is None:
            _handle = _agent.current().create_rref(HELD, [_ferry.holder_tensor(value)], [])
        self.__handle = _handle
        self._py = _py  # the owner holds a Python object (not C bytes)

    def _handle(self):
        return self.__handle

    # ---- identity ----------------------------------------------------
    def is_owner(self):
        return self.__handle.is_owner()

    def owner(self):
        """The owner's WorkerInfo."""
        return _agent.worker_info_by_id(self.__handle.owner_id())

    def _owner_target(self):
        return "#%d" % self.__handle.owner_id()  # the member id, not a rank

    def owner_name(self):
        return self.owner().name

    def confirmed_by_owner(self):
        """True on the owner; on a user, once the owner acknowledged this
        fork (the remote() call answered, or the fork's notice acknowledged)."""
        return self.__handle.confirmed_by_owner()

    def __repr__(self):
        rref_id, fork_id = self.__handle.ids()
        kind = "OwnerRRef" if self.is_owner() else "UserRRef"
        return "%s(rref_id=%s, fork_id=%s)" % (kind, rref_id, fork_id)

    # ---- the value ---------------------------------------------------
    def local_value(self, timeout=None):
        """On the owner: the value itself (waits for a remote() still
        running). Raises on a user, as torch does."""
        if not self.is_owner():
            raise RuntimeError(
                "ferry: local_value() is for the owner (%s); call to_here() on a user"
                % self.owner_name())
        data, value = self.__handle.local_value(_agent.timeout_ms(timeout))
        if data != HELD:  # made in C: its bytes and tensors (a list of arrays)
            return _agent.Raw(data, value)
        return value  # the held Python object (which may be a list)

    def to_here(self, timeout=None):
        """A copy of the value, fetched from the owner (the value itself on
        the owner)."""
        if self.is_owner():
            return self.local_value(timeout)
        if not self._py:
            message = self.__handle.to_here(_agent.timeout_ms(timeout))
            return _agent.decode_raw(message)
        return _agent.fetch(self._owner_target(), self, timeout)

    def _get_type(self, timeout=None, blocking=True):
        """The value's type (torch's RRef._get_type): asked of the owner
        once, then remembered. blocking=False returns a Future of it."""
        known = getattr(self, "_type", None)
        if known is None:
            if self.is_owner():
                known = type(self.local_value(timeout))
            else:
                fut = _agent.rpc_async(self._owner_target(), _type_of, (self,),
                                       timeout=timeout)
                if not blocking:
                    return fut.then(lambda f: self._remember_type(f.value()))
                known = fut.wait()
            self._type = known
        if not blocking:
            fut = Future()
            fut.set_result(known)
            return fut
        return known

    def _remember_type(self, t):
        self._type = t
        return t

    # ---- proxies: rref.rpc_sync().method(*args) on the owner ----------
    def rpc_sync(self, timeout=None):
        return _Proxy(self, _agent.rpc_sync, timeout)

    def rpc_async(self, timeout=None):
        return _Proxy(self, _agent.rpc_async, timeout)

    def remote(self, timeout=None):
        return _Proxy(self, _agent.remote, timeout)

    def __reduce__(self):
        raise TypeError("ferry: an RRef travels only as an argument or result of a "
                        "ferry call (pickled by ferry, not by plain pickle)")


def _type_of(rref):
    return type(rref.local_value())


def _call_method(rref, method, args, kwargs):
    """Runs on the owner: the proxies' remote end."""
    return getattr(rref.local_value(), method)(*args, **kwargs)


class _Proxy:
    def __init__(self, rref, call, timeout):
        self._rref, self._call, self._timeout = rref, call, timeout

    def __getattr__(self, method):
        def invoke(*args, **kwargs):
            # By id: owner() would scan the membership on every call.
            return self._call(self._rref._owner_target(), _call_method,
                              (self._rref, method, args, kwargs), timeout=self._timeout)
        return invoke
