"""Calls before init and after shutdown; init twice."""

import pytest

import ferry
import remote_fns as fns


def test_call_before_init_is_a_clear_error():
    with pytest.raises(ferry.NotInitializedError, match="init_rpc"):
        ferry.rpc_sync("w1", fns.add, args=(1, 2))
    with pytest.raises(ferry.NotInitializedError):
        ferry.get_worker_info()


def test_init_twice_and_after_shutdown():
    ferry.init_rpc("solo", backend="tcp", store="127.0.0.1:0", host_store=True)
    try:
        with pytest.raises(RuntimeError, match="already"):
            ferry.init_rpc("solo2", backend="tcp", store="127.0.0.1:0", host_store=True)
        assert ferry.get_worker_info().name == "solo"
        host, port = ferry.store_address().rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0  # the port the system chose
    finally:
        ferry.shutdown()
    ferry.shutdown()  # idempotent
    with pytest.raises(ferry.NotInitializedError):
        ferry.rpc_async("solo", fns.add, args=(1, 2))


def test_unknown_backend_names_what_exists():
    with pytest.raises(ferry.FerryError) as e:
        ferry.init_rpc("x", backend="tcpp", store="127.0.0.1:0", host_store=True)
    assert "tcp" in str(e.value)
