"""torch's own RPC test suite (GENERIC_TESTS, shipped with torch in
torch/testing/_internal/distributed/rpc/) against one backend, chosen by
FERRY_SUITE_BACKEND: "ferry-tcp" (default), "ferry-shm" or "tensorpipe"
(the reference). Classes are named <Backend><Suite>, e.g. FerryTcpRpcTest.

scripts/torch-rpc-suite.sh runs it per class with a per-test time limit
(DISTRIBUTED_TESTS_DEFAULT_TIMEOUT); ctest runs a subset.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the expecttest stand-in, the fixture

import torch.distributed.rpc as rpc  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.rpc_utils import GENERIC_TESTS, generate_tests  # noqa: E402

BACKEND = os.environ.get("FERRY_SUITE_BACKEND", "ferry-tcp")

if BACKEND == "tensorpipe":
    from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import (  # noqa: E402
        TensorPipeRpcAgentTestFixture)
    globals().update(generate_tests("TensorPipe", TensorPipeRpcAgentTestFixture, GENERIC_TESTS,
                                    __name__))
elif BACKEND in ("ferry-tcp", "ferry-shm"):
    from ferry_rpc_fixture import fixture_for  # noqa: E402
    transport = BACKEND.split("-", 1)[1]
    globals().update(generate_tests("Ferry" + transport.capitalize(), fixture_for(transport),
                                    GENERIC_TESTS, __name__))
else:
    raise SystemExit("FERRY_SUITE_BACKEND must be ferry-tcp, ferry-shm or tensorpipe, not %r"
                     % BACKEND)

assert rpc.is_available()

if __name__ == "__main__":
    run_tests()
