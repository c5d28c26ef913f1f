// FERRY_CUDA_PROFILE's wrappers (ferry_support/cuda_driver_profile.h): a
// wrapped entry point still reaches the driver with the caller's arguments
// and returns its result, and the table counts each call and each query
// that found its work unfinished. Runs without a GPU: the "driver" here is
// a Driver whose members point at fakes.
#include <ferry_support/cuda_driver.h>

#include <gtest/gtest.h>

namespace {

int query_calls = 0;
CUresult FakeEventQuery(CUevent) {
  return ++query_calls % 2 == 1 ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

size_t last_alloc = 0;
CUresult FakeMemAlloc(CUdeviceptr* p, size_t n) {
  last_alloc = n;
  *p = 0x1000;
  return CUDA_SUCCESS;
}

TEST(CudaDriverProfile, WrappedCallsReachTheDriverAndAreCounted) {
  ferry_cuda::Driver d;
  d.cuEventQuery = &FakeEventQuery;
  d.cuMemAlloc = &FakeMemAlloc;
  ferry_cuda::profile::Install(&d);
  ASSERT_TRUE(ferry_cuda::profile::Enabled());
  EXPECT_NE(d.cuEventQuery, &FakeEventQuery) << "not wrapped";

  EXPECT_EQ(d.cuEventQuery(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(d.cuEventQuery(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d.cuEventQuery(nullptr), CUDA_ERROR_NOT_READY);
  CUdeviceptr p = 0;
  EXPECT_EQ(d.cuMemAlloc(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(p, CUdeviceptr{0x1000});
  EXPECT_EQ(last_alloc, 4096u);
  EXPECT_EQ(query_calls, 3);

  auto& registry = ferry_cuda::profile::Registry::Get();
  const auto& query = registry.Named("cuEventQuery");
  EXPECT_EQ(query.calls.load(), 3u);
  EXPECT_EQ(query.not_ready.load(), 2u);
  EXPECT_EQ(registry.Named("cuMemAlloc").calls.load(), 1u);
  EXPECT_EQ(registry.Named("cuMemFree").calls.load(), 0u);

  ferry_cuda::profile::Stage("a stage").Add(1500);
  ferry_cuda::profile::Stage("a stage").Add(500);
  const auto& stage = registry.Named("a stage");
  EXPECT_EQ(stage.calls.load(), 2u);
  EXPECT_EQ(stage.total_ns.load(), 2000u);
  EXPECT_EQ(stage.max_ns.load(), 1500u);

  testing::internal::CaptureStderr();
  registry.Print();
  const std::string table = testing::internal::GetCapturedStderr();
  EXPECT_NE(table.find("cuEventQuery"), std::string::npos) << table;
  EXPECT_NE(table.find("a stage"), std::string::npos) << table;
  EXPECT_EQ(table.find("cuMemFree"), std::string::npos)
      << "uncalled entries are left out";
}

}  // namespace
