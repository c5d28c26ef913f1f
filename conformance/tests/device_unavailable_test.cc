// DEV-* in a build without the CUDA toolkit's headers (FERRY_HAVE_CUDA off):
// the device requirements (tests/device_test.cc) cannot be compiled, so
// each is registered here and reported "not run" with the reason, rather
// than missing from the report. A plugin that moves host memory only is
// told that, as in a CUDA build.
#include "harness/conformance_test.h"

namespace ferry::conformance {
namespace {

class DeviceTest : public ConformanceTest {
 protected:
  void SetUp() override {
    ConformanceTest::SetUp();
    if (IsSkipped() || HasFatalFailure() || a() == nullptr) return;
    if ((a()->info().memory_kinds & FERRY_MEM_CUDA) == 0) {
      FERRY_NOT_RUN("plugin moves host memory only");
    }
    FERRY_NOT_RUN(
        "built without the CUDA toolkit (no cuda.h at configure time: install the "
        "toolkit or set -DFERRY_CUDA_ROOT, and rebuild ferry-conformance)");
  }
};

TEST_P(DeviceTest, MemoryServices) {}
TEST_P(DeviceTest, SegmentsBetweenProcesses) {}
TEST_P(DeviceTest, ReadsAfterProducerStream) {}
TEST_P(DeviceTest, FreedAndReusedMemory) {}
TEST_P(DeviceTest, ReceiverKilledWithHandleOpen) {}

INSTANTIATE_TEST_SUITE_P(Plugins, DeviceTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
