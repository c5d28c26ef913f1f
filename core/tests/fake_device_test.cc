// The core's device paths on a machine without a GPU, over the "fakedev"
// test transport (fakedev_plugin.cc), whose "CUDA memory" is host memory
// tagged cuda:0: it fakes the GPU, nothing else. What is real: the route
// each message takes, the second (device) connection to a peer beside its
// tcp connection, the one sequence space across both, staging through host
// memory for a peer no device transport reaches, receive placement into
// memory from the worker's device allocator (the transport's, or the
// application's), and the allocation failure of a call. The same paths
// over cuda_ipc on a real GPU: device_rpc_test.cc.
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include "test_workers.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using ferry::Worker;

// No test here declares a peer dead; the peer timeout is long because a
// 64 MiB message through fakedev keeps a worker's one pumping thread busy
// for seconds under ThreadSanitizer on two loaded cores, and its peer must
// not read that silence as a death.
Worker::Options Opts(const std::string& name, const std::string& store,
                     const std::string& transport, bool host = false) {
  return ferry_test::WorkerOptions(name, ferry_test::JobName("fake_device_test"), store,
                                   host, transport, 10000ms, 20000ms);
}

std::atomic<int> g_deleted{0};

using ferry_test::Pattern;

// n bytes "in CUDA memory" (host memory tagged cuda:0: fakedev reads it as
// such), filled with a pattern.
DLManagedTensor* DeviceTensor(size_t n, uint8_t seed) {
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = Pattern(i, seed);
  return ferry_test::VectorTensor(std::move(data), DLDevice{kDLCUDA, 0},
                                  DLDataType{kDLUInt, 8, 1}, &g_deleted);
}

// Checks a received tensor's bytes (fake device memory is readable).
bool HasPattern(const DLManagedTensor* t, size_t n, uint8_t seed) {
  if (t == nullptr || t->dl_tensor.ndim != 1 || t->dl_tensor.shape[0] != int64_t(n))
    return false;
  const auto* p =
      static_cast<const uint8_t*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != Pattern(i, seed)) return false;
  }
  return true;
}

// What the echo handlers saw.
std::mutex g_mu;
std::vector<int32_t> g_seen_devices;

void RegisterEcho(Worker& w) {
  w.Register("echo", [](ferry::Call& call, ferry::Message args) {
    ferry::Payload out{std::string(args.bytes())};
    for (uint32_t i = 0; i < args.num_tensors(); ++i) {
      DLManagedTensor* t = args.TakeTensor(i);
      {
        std::lock_guard<std::mutex> l(g_mu);
        g_seen_devices.push_back(t->dl_tensor.device.device_type);
      }
      out.Tensor(t);
    }
    call.Reply(std::move(out));
  });
}

std::vector<int32_t> SeenDevices() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_seen_devices;
}

// An application allocator that counts (fake device memory: malloc).
struct CountingAllocator {
  std::atomic<int> allocs{0}, frees{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> fail{false};
  ferry_device_allocator_t c{};
  CountingAllocator() {
    c.struct_size = FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE;
    c.user_data = this;
    c.alloc = [](void* ud, ferry_device_t device, uint64_t length) -> void* {
      auto* self = static_cast<CountingAllocator*>(ud);
      if (self->fail || device.type != FERRY_DEVICE_CUDA) return nullptr;
      self->allocs++;
      self->bytes += length;
      return std::malloc(length);
    };
    c.free = [](void* ud, ferry_device_t, void* data, uint64_t) {
      static_cast<CountingAllocator*>(ud)->frees++;
      std::free(data);
    };
  }
};

class FakeDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FERRY_PLUGIN_PATH", FERRY_TEST_PLUGIN_DIR, 1);
    unsetenv("FERRY_FAKEDEV_DOMAIN");
    g_deleted = 0;
    std::lock_guard<std::mutex> l(g_mu);
    g_seen_devices.clear();
  }
  void StartSeed(const std::string& transport) {
    seed_ = std::make_unique<Worker>(Opts("seed", "127.0.0.1:0", transport, true));
    RegisterEcho(*seed_);
  }
  std::unique_ptr<Worker> Join(const std::string& name, const std::string& transport,
                               const ferry_device_allocator_t* allocator = nullptr) {
    Worker::Options o = Opts(name, seed_->store_address(), transport);
    o.device_allocator = allocator;
    auto w = std::make_unique<Worker>(o);
    RegisterEcho(*w);
    return w;
  }
  std::unique_ptr<Worker> seed_;
};

TEST_F(FakeDeviceTest, DeviceTensorsTakeTheDeviceTransportBothWays) {
  StartSeed("tcp,fakedev");
  auto w1 = Join("w1", "tcp,fakedev");
  const size_t small = 4096, big = size_t{64} << 20;
  ferry::Payload p("dev");
  p.Tensor(DeviceTensor(small, 1))
      .Tensor(DeviceTensor(big, 2))
      .Stream(FERRY_STREAM_LEGACY);
  auto reply = seed_->RpcSync("w1", "echo", std::move(p));
  EXPECT_EQ(reply.bytes(), "dev");
  ASSERT_EQ(reply.num_tensors(), 2u);
  DLManagedTensor* a = reply.TakeTensor(0);
  DLManagedTensor* b = reply.TakeTensor(1);
  EXPECT_EQ(a->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(b->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(a->dl_tensor.device.device_id, 0);
  EXPECT_TRUE(HasPattern(a, small, 1));
  EXPECT_TRUE(HasPattern(b, big, 2));
  a->deleter(a);
  b->deleter(b);
  EXPECT_EQ(SeenDevices(), (std::vector<int32_t>{kDLCUDA, kDLCUDA}))
      << "the handler got device tensors";
  EXPECT_EQ(g_deleted.load(), 2);
  EXPECT_EQ(seed_->Stats().device_messages, 1u);
  EXPECT_EQ(w1->Stats().device_messages, 1u) << "the reply went over fakedev too";
  EXPECT_EQ(seed_->Stats().staged_messages, 0u);
}

TEST_F(FakeDeviceTest, HostAndDeviceMessagesInterleaveOverTwoConnections) {
  StartSeed("tcp,fakedev");
  auto w1 = Join("w1", "tcp,fakedev");
  // Host messages keep the primary (tcp: priority 10 over fakedev's 5),
  // device ones take fakedev; one sequence space, no duplicate, no loss.
  std::vector<ferry::Future> futures;
  for (int i = 0; i < 40; ++i) {
    ferry::Payload p(std::to_string(i));
    if (i % 2 == 0) p.Tensor(DeviceTensor(100 + i, static_cast<uint8_t>(i)));
    futures.push_back(seed_->RpcAsync("w1", "echo", std::move(p)));
  }
  for (int i = 0; i < 40; ++i) {
    ferry::Message m = futures[i].Get();
    EXPECT_EQ(m.bytes(), std::to_string(i));
    ASSERT_EQ(m.num_tensors(), i % 2 == 0 ? 1u : 0u);
    if (i % 2 == 0) {
      DLManagedTensor* t = m.TakeTensor(0);
      EXPECT_EQ(t->dl_tensor.device.device_type, kDLCUDA);
      EXPECT_TRUE(HasPattern(t, 100 + i, static_cast<uint8_t>(i)));
      t->deleter(t);
    }
  }
  EXPECT_EQ(seed_->Stats().device_messages, 20u);
  bool found = false;
  for (const auto& m : seed_->Members()) {
    if (m.name == "w1") {
      found = true;
      EXPECT_EQ(m.transport, "tcp") << "the primary connection is unchanged";
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(FakeDeviceTest, OneDeviceTransportCarriesEverything) {
  StartSeed("fakedev");
  auto w1 = Join("w1", "fakedev");
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(1 << 20, 9));
  auto reply = seed_->RpcSync("w1", "echo", std::move(p));
  DLManagedTensor* t = reply.TakeTensor(0);
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_TRUE(HasPattern(t, 1 << 20, 9));
  t->deleter(t);
  EXPECT_EQ(seed_->RpcSync("w1", "echo", ferry::Payload("host")).bytes(), "host");
  EXPECT_EQ(seed_->Stats().device_messages, 1u);
}

TEST_F(FakeDeviceTest, TheApplicationsAllocatorReceivesDeviceTensorsAndFreesOnce) {
  StartSeed("tcp,fakedev");
  CountingAllocator alloc;
  auto w1 = Join("w1", "tcp,fakedev", &alloc.c);
  w1->Register("sum", [](ferry::Call& call, ferry::Message args) {
    // Looks at the tensor without taking it: it is freed with the message.
    std::lock_guard<std::mutex> l(g_mu);
    g_seen_devices.push_back(args.num_tensors());
    call.Reply(ferry::Payload("ok"));
  });
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(size_t{8} << 20, 3));
  EXPECT_EQ(seed_->RpcSync("w1", "sum", std::move(p)).bytes(), "ok");
  EXPECT_EQ(alloc.allocs.load(), 1);
  EXPECT_EQ(alloc.bytes.load(), uint64_t{8} << 20);
  // Freed once the handler's message is gone (just after the reply).
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (alloc.frees.load() < 1 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(alloc.frees.load(), 1);
  // A tensor the handler keeps (echo) is freed by its deleter, once.
  ferry::Payload q("y");
  q.Tensor(DeviceTensor(4096, 4));
  auto reply = seed_->RpcSync("w1", "echo", std::move(q));
  EXPECT_EQ(alloc.allocs.load(), 2);
  DLManagedTensor* t = reply.TakeTensor(0);  // the seed's: fakedev's allocator
  EXPECT_TRUE(HasPattern(t, 4096, 4));
  t->deleter(t);
  w1.reset();
  EXPECT_EQ(alloc.frees.load(), 2);
}

TEST_F(FakeDeviceTest, AFailedDeviceAllocationFailsTheCallNamingSizeAndDevice) {
  StartSeed("tcp,fakedev");
  CountingAllocator alloc;
  alloc.fail = true;
  auto w1 = Join("w1", "tcp,fakedev", &alloc.c);
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(1 << 20, 5));
  try {
    seed_->RpcSync("w1", "echo", std::move(p));
    FAIL() << "the call succeeded without device memory";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_RESOURCE_EXHAUSTED) << e.what();
    EXPECT_NE(std::string(e.what()).find("1048576 bytes on cuda:0"), std::string::npos)
        << e.what();
  }
  // The worker is fine afterwards.
  EXPECT_EQ(seed_->RpcSync("w1", "echo", ferry::Payload("still")).bytes(), "still");
}

TEST_F(FakeDeviceTest, APeerWithoutADeviceTransportGetsStagedTensorsInHostMemory) {
  StartSeed("tcp,fakedev");
  auto w1 = Join("w1", "tcp");
  const size_t n = size_t{3} << 20;
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(n, 6));
  auto reply = seed_->RpcSync("w1", "echo", std::move(p));
  // w1 cannot place it in device memory: it got a host tensor (and warned).
  EXPECT_EQ(SeenDevices(), std::vector<int32_t>{kDLCPU});
  DLManagedTensor* t = reply.TakeTensor(0);
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCPU);
  EXPECT_TRUE(HasPattern(t, n, 6));
  t->deleter(t);
  const auto s = seed_->Stats();
  EXPECT_EQ(s.staged_messages, 1u);
  EXPECT_EQ(s.staged_bytes, n);
  EXPECT_EQ(s.device_messages, 0u);
  EXPECT_EQ(g_deleted.load(), 1) << "the staged tensor was released once";
  // And w1 (tcp alone) cannot send a device tensor at all.
  ferry::Payload q("y");
  q.Tensor(DeviceTensor(16, 7));
  try {
    w1->RpcSync("seed", "echo", std::move(q));
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_FAILED_PRECONDITION) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda_ipc"), std::string::npos) << e.what();
  }
}

TEST_F(FakeDeviceTest, AnotherHostGetsStagedTensorsBackInDeviceMemory) {
  StartSeed("tcp,fakedev");
  setenv("FERRY_FAKEDEV_DOMAIN", "another-host", 1);  // plays another host
  auto w1 = Join("w1", "tcp,fakedev");
  unsetenv("FERRY_FAKEDEV_DOMAIN");
  const size_t n = size_t{2} << 20;
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(n, 8));
  auto reply = seed_->RpcSync("w1", "echo", std::move(p));
  EXPECT_EQ(SeenDevices(), std::vector<int32_t>{kDLCUDA})
      << "w1 copied the staged tensor into its device memory";
  DLManagedTensor* t = reply.TakeTensor(0);
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCUDA) << "and so did the seed";
  EXPECT_TRUE(HasPattern(t, n, 8));
  t->deleter(t);
  EXPECT_EQ(seed_->Stats().staged_messages, 1u);
  EXPECT_EQ(w1->Stats().staged_messages, 1u);
  EXPECT_EQ(seed_->Stats().device_messages, 0u);
}

TEST_F(FakeDeviceTest, AHostOnlyDeviceTransportCannotCarryDeviceTensors) {
  setenv("FERRY_FAKEDEV_HOST_ONLY", "1", 1);
  StartSeed("tcp,fakedev");
  auto w1 = Join("w1", "tcp,fakedev");
  unsetenv("FERRY_FAKEDEV_HOST_ONLY");
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(64, 1));
  try {
    seed_->RpcSync("w1", "echo", std::move(p));
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_FAILED_PRECONDITION) << e.what();
  }
}

}  // namespace
