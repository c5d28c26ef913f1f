"""The FERRY backend as torch's RPC test suite sees it: an
RpcAgentTestFixture (torch/testing/_internal/distributed/rpc/) that runs
every generic test over ferry on one transport."""

import torch.distributed.rpc as rpc
from torch.testing._internal.distributed.rpc.rpc_agent_test_fixture import RpcAgentTestFixture

import ferry.torch  # noqa: F401  (registers BackendType.FERRY)

# What a call sees when its peer shut down or died under it: ferry fails
# every pending call to a lost peer (PEER_GONE), cancels its own pending
# calls when it leaves (CANCELLED), and refuses calls once stopped.
SHUTDOWN_ERRORS = [
    "PEER_GONE",
    "CANCELLED",
    "UNAVAILABLE",
    "RPC is no longer running on this node",
    "the FERRY rpc agent shut down",
]


def fixture_for(transport):
    class FerryRpcAgentTestFixture(RpcAgentTestFixture):
        @property
        def rpc_backend(self):
            return rpc.backend_registry.BackendType["FERRY"]

        @property
        def rpc_backend_options(self):
            return rpc.backend_registry.construct_rpc_backend_options(
                self.rpc_backend, init_method=self.init_method, transport=transport)

        def get_shutdown_error_regex(self):
            return "|".join("(%s)" % e for e in SHUTDOWN_ERRORS)

        def get_timeout_error_regex(self):
            return "RPC ran for more than"

    FerryRpcAgentTestFixture.__name__ = "Ferry%sRpcAgentTestFixture" % transport.capitalize()
    return FerryRpcAgentTestFixture
