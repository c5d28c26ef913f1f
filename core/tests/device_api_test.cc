// Device tensors through the public API on a machine without a GPU: what a
// worker with no device-capable transport does with a CUDA tensor (refuses
// it at once, naming cuda_ipc, and releases it exactly once), that pinned
// host tensors still travel, and that the device allocator option is
// checked. The device paths themselves (cuda_ipc routing, staging, receive
// placement into device memory) need a GPU: device_rpc_test.cc.
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include "test_workers.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ferry::Worker;

Worker::Options Opts(const std::string& name, const std::string& store,
                     bool host = false) {
  return ferry_test::WorkerOptions(name, ferry_test::JobName("device_api_test"), store,
                                   host, "tcp", 1000ms, 10000ms);
}

std::atomic<int> g_deleted{0};

// A tensor of n floats that claims to live on `device`. Its memory is host
// memory: on these paths ferry must refuse it before reading it.
DLManagedTensor* MakeTensor(int64_t n, DLDevice device) {
  return ferry_test::VectorTensor(std::vector<float>(static_cast<size_t>(n), 3.0f),
                                  device, DLDataType{kDLFloat, 32, 1}, &g_deleted);
}

class DeviceApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::make_unique<Worker>(Opts("seed", "127.0.0.1:0", true));
    w1_ = std::make_unique<Worker>(Opts("w1", seed_->store_address()));
    w1_->Register("echo", [](ferry::Call& call, ferry::Message args) {
      ferry::Payload out{std::string(args.bytes())};
      for (uint32_t i = 0; i < args.num_tensors(); ++i) out.Tensor(args.TakeTensor(i));
      call.Reply(std::move(out));
    });
    g_deleted = 0;
  }
  std::unique_ptr<Worker> seed_, w1_;
};

TEST_F(DeviceApiTest, ACudaTensorWithoutADeviceTransportFailsAtOnceNamingCudaIpc) {
  ferry::Payload p("x");
  p.Tensor(MakeTensor(1024, DLDevice{kDLCUDA, 0})).Stream(FERRY_STREAM_LEGACY);
  const auto start = std::chrono::steady_clock::now();
  try {
    seed_->RpcSync("w1", "echo", std::move(p));
    FAIL() << "a CUDA tensor went over tcp alone";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_FAILED_PRECONDITION) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda_ipc"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "it fails at once";
  EXPECT_EQ(g_deleted.load(), 1) << "the refused tensor is released exactly once";
  const auto stats = seed_->Stats();
  EXPECT_EQ(stats.staged_messages, 0u);
  EXPECT_EQ(stats.device_messages, 0u);
}

TEST_F(DeviceApiTest, ATensorOnAnUnsupportedDeviceIsRefused) {
  ferry::Payload p("x");
  p.Tensor(MakeTensor(4, DLDevice{kDLROCM, 0}));
  try {
    seed_->RpcSync("w1", "echo", std::move(p));
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_INVALID_ARGUMENT) << e.what();
    EXPECT_NE(std::string(e.what()).find("rocm:0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g_deleted.load(), 1);
}

TEST_F(DeviceApiTest, PinnedHostTensorsStillTravelAndArriveInHostMemory) {
  ferry::Payload p("x");
  p.Tensor(MakeTensor(1 << 18, DLDevice{kDLCUDAHost, 0}));
  auto reply = seed_->RpcSync("w1", "echo", std::move(p));
  ASSERT_EQ(reply.num_tensors(), 1u);
  DLManagedTensor* t = reply.TakeTensor(0);
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(static_cast<const float*>(t->dl_tensor.data)[(1 << 18) - 1], 3.0f);
  t->deleter(t);
  EXPECT_EQ(seed_->Stats().device_messages, 0u);
}

void* NeverAlloc(void*, ferry_device_t, uint64_t) {
  return nullptr;
}
void NeverFree(void*, ferry_device_t, void*, uint64_t) {}

TEST(DeviceAllocatorOptionTest, IsValidated) {
  Worker::Options o = Opts("seed", "127.0.0.1:0", true);
  o.job = "device_api_test.allocator";
  ferry_device_allocator_t a{};
  a.struct_size = 8;
  a.alloc = NeverAlloc;
  a.free = NeverFree;
  o.device_allocator = &a;
  try {
    Worker w(o);
    FAIL() << "a too small struct_size was accepted";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE"),
              std::string::npos)
        << e.what();
  }
  a.struct_size = FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE;
  a.free = nullptr;
  try {
    Worker w(o);
    FAIL() << "an allocator without free was accepted";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("free is NULL"), std::string::npos) << e.what();
  }
  a.free = NeverFree;
  a.alloc = nullptr;
  try {
    Worker w(o);
    FAIL() << "an allocator without alloc was accepted";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("alloc is NULL"), std::string::npos) << e.what();
  }
  // A whole one is accepted, with or without a device transport to use it.
  a.alloc = NeverAlloc;
  Worker w(o);
  EXPECT_NE(w.id(), 0u);
}

TEST(DeviceAllocatorOptionTest, AnOlderOptionsStructHasNone) {
  // A program built against API 0.1 passes the smaller struct: accepted.
  ferry_worker_options_t c{};
  c.struct_size = FERRY_STRUCT_SIZE(ferry_worker_options_t, executor_threads);
  c.name = "seed";
  c.job = "device_api_test.older";
  c.transport = "tcp";
  c.store_address = "127.0.0.1:0";
  c.flags = FERRY_WORKER_HOST_STORE;
  c.secret = "s";
  ferry_worker_t* w = nullptr;
  ASSERT_EQ(ferry_worker_start(&c, &w), FERRY_OK) << ferry_last_error();
  ferry_worker_stats_t st{};
  st.struct_size = FERRY_WORKER_STATS_STRUCT_SIZE;
  ASSERT_EQ(ferry_worker_get_stats(w, &st), FERRY_OK);
  EXPECT_EQ(st.struct_size, FERRY_WORKER_STATS_STRUCT_SIZE);
  EXPECT_EQ(st.staged_bytes, 0u);
  ferry_worker_destroy(w);
}

}  // namespace
