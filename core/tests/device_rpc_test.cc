// Device tensors end to end on a real GPU: two worker processes on one
// host (this test and a peer it starts: this same binary with
// --device-rpc-peer), CUDA tensors by rpc_sync both ways over cuda_ipc,
// received into device memory (ferry's allocator, or the application's),
// and staged through host memory where the peer has no cuda_ipc. Each test
// skips with "no GPU: <reason>" where the driver or a device is missing.
// Without a GPU the same core paths run over a fake device transport in
// fake_device_test.cc.
#include <ferry_support/cuda_driver.h>
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_workers.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using ferry::Worker;

const ferry_cuda::Driver* cu = nullptr;
std::string g_self_exe;

std::string JobName() {
  return ferry_test::JobName("device_rpc_test") + "." + std::to_string(getpid());
}

using ferry_test::Pattern;

// The device's primary context, current on this thread.
bool UseDevice(std::string* why) {
  CUdevice dev;
  CUcontext ctx;
  CUresult r = cu->cuDeviceGet(&dev, 0);
  if (r == CUDA_SUCCESS) r = cu->cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = cu->cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) *why = cu->ErrorText(r);
  return r == CUDA_SUCCESS;
}

std::atomic<int> g_deleted{0};

// n bytes on cuda:0 (cuMemAlloc), filled with a pattern.
DLManagedTensor* DeviceTensor(size_t n, uint8_t seed) {
  struct Holder {
    DLManagedTensor t;
    CUdeviceptr p = 0;
    int64_t shape[1];
  };
  auto* h = new Holder();
  EXPECT_EQ(cu->cuMemAlloc(&h->p, n), CUDA_SUCCESS);
  std::vector<uint8_t> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = Pattern(i, seed);
  EXPECT_EQ(cu->cuMemcpyHtoD(h->p, host.data(), n), CUDA_SUCCESS);
  h->shape[0] = static_cast<int64_t>(n);
  ferry_test::SetTensor1D(h->t.dl_tensor, reinterpret_cast<void*>(h->p), h->shape,
                          DLDevice{kDLCUDA, 0}, DLDataType{kDLUInt, 8, 1});
  h->t.manager_ctx = h;
  h->t.deleter = [](DLManagedTensor* self) {
    auto* hh = static_cast<Holder*>(self->manager_ctx);
    cu->cuMemFree(hh->p);
    delete hh;
    g_deleted.fetch_add(1);
  };
  return &h->t;
}

// A received tensor's bytes, wherever they are.
::testing::AssertionResult HasPattern(const DLManagedTensor* t, size_t n, uint8_t seed) {
  if (t == nullptr) return ::testing::AssertionFailure() << "no tensor";
  if (t->dl_tensor.shape[0] != static_cast<int64_t>(n))
    return ::testing::AssertionFailure() << "shape " << t->dl_tensor.shape[0];
  std::vector<uint8_t> host(n);
  const char* src =
      static_cast<const char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
  if (t->dl_tensor.device.device_type == kDLCUDA) {
    CUresult r = cu->cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(src), n);
    if (r != CUDA_SUCCESS) return ::testing::AssertionFailure() << cu->ErrorText(r);
  } else {
    std::memcpy(host.data(), src, n);
  }
  for (size_t i = 0; i < n; ++i) {
    if (host[i] != Pattern(i, seed))
      return ::testing::AssertionFailure() << "byte " << i << " differs";
  }
  return ::testing::AssertionSuccess();
}

// The peer process: joins, echoes, quits when told.
int PeerMain(const std::string& store, const std::string& transport,
             const std::string& job) {
  std::atomic<bool> quit{false};
  try {
    Worker::Options o;
    o.name = "peer";
    o.job = job;
    o.transport = transport;
    o.store = store;
    o.secret = "device-test";
    o.default_timeout = 60000ms;
    Worker w(o);
    w.Register("echo", [](ferry::Call& call, ferry::Message args) {
      ferry::Payload out{std::string(args.bytes())};
      for (uint32_t i = 0; i < args.num_tensors(); ++i) out.Tensor(args.TakeTensor(i));
      call.Reply(std::move(out));
    });
    w.Register("devices", [](ferry::Call& call, ferry::Message args) {
      std::string kinds;
      for (uint32_t i = 0; i < args.num_tensors(); ++i) {
        DLManagedTensor* t = args.TakeTensor(i);
        kinds += t->dl_tensor.device.device_type == kDLCUDA ? "cuda," : "host,";
        t->deleter(t);
      }
      call.Reply(ferry::Payload(kinds));
    });
    w.Register("quit", [&quit](ferry::Call& call, ferry::Message) {
      quit = true;
      call.Reply();
    });
    while (!quit) std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(50ms);
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "device_rpc_test peer: %s\n", e.what());
    return 1;
  }
  return 0;
}

// A peer process, and the seed worker here that hosts the store.
class DeviceRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    cu = ferry_cuda::Driver::Get(&why);
    if (cu == nullptr) GTEST_SKIP() << "no GPU: " << why;
    if (!UseDevice(&why)) GTEST_SKIP() << "no GPU: cuda:0 is not usable: " << why;
    g_deleted = 0;
  }
  void TearDown() override {
    if (seed_) {
      try {
        seed_->RpcSync("peer", "quit", ferry::Payload(), 10000ms);
      } catch (const ferry::Error&) {
      }
    }
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the peer failed";
    }
    seed_.reset();
  }
  // Starts the seed here (transport `mine`) and the peer (`theirs`).
  void Start(const std::string& mine, const std::string& theirs,
             const ferry_device_allocator_t* allocator = nullptr) {
    Worker::Options o;
    o.name = "seed";
    o.job = JobName();
    o.transport = mine;
    o.store = "127.0.0.1:0";
    o.host_store = true;
    o.secret = "device-test";
    o.default_timeout = 60000ms;
    o.device_allocator = allocator;
    seed_ = std::make_unique<Worker>(o);
    const std::string store = seed_->store_address();
    const std::string job = o.job;
    std::vector<char*> argv{
        const_cast<char*>(g_self_exe.c_str()), const_cast<char*>("--device-rpc-peer"),
        const_cast<char*>(store.c_str()),      const_cast<char*>(theirs.c_str()),
        const_cast<char*>(job.c_str()),        nullptr};
    ASSERT_EQ(
        posix_spawn(&pid_, g_self_exe.c_str(), nullptr, nullptr, argv.data(), environ),
        0);
    ASSERT_TRUE(seed_->Members().size() >= 1);
  }
  std::unique_ptr<Worker> seed_;
  pid_t pid_ = 0;
};

TEST_F(DeviceRpcTest, DeviceTensorsRoundTripOverCudaIpc) {
  try {
    Start("tcp,cuda_ipc", "tcp,cuda_ipc");
  } catch (const ferry::Error& e) {
    GTEST_SKIP() << "no GPU: cuda_ipc does not start here: " << e.what();
  }
  const size_t small = 4096, big = size_t{64} << 20;
  ferry::Payload p("dev");
  p.Tensor(DeviceTensor(small, 1))
      .Tensor(DeviceTensor(big, 2))
      .Stream(FERRY_STREAM_LEGACY);
  auto reply = seed_->RpcSync("peer", "echo", std::move(p));
  ASSERT_EQ(reply.num_tensors(), 2u);
  DLManagedTensor* a = reply.TakeTensor(0);
  DLManagedTensor* b = reply.TakeTensor(1);
  EXPECT_EQ(a->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(b->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_TRUE(HasPattern(a, small, 1));
  EXPECT_TRUE(HasPattern(b, big, 2));
  a->deleter(a);
  b->deleter(b);
  EXPECT_EQ(g_deleted.load(), 2) << "the sent tensors were released once each";
  // The peer received them in device memory, too.
  ferry::Payload q("k");
  q.Tensor(DeviceTensor(small, 3));
  EXPECT_EQ(seed_->RpcSync("peer", "devices", std::move(q)).bytes(), "cuda,");
  const auto s = seed_->Stats();
  EXPECT_EQ(s.device_messages, 2u) << "both went over cuda_ipc";
  EXPECT_EQ(s.staged_messages, 0u);
  // Host messages keep the primary.
  EXPECT_EQ(seed_->RpcSync("peer", "echo", ferry::Payload("host")).bytes(), "host");
  for (const auto& m : seed_->Members()) {
    if (m.name == "peer") {
      EXPECT_EQ(m.transport, "tcp");
    }
  }
}

struct CountingAllocator {
  std::atomic<int> allocs{0}, frees{0};
  ferry_device_allocator_t c{};
  CountingAllocator() {
    c.struct_size = FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE;
    c.user_data = this;
    c.alloc = [](void* ud, ferry_device_t device, uint64_t length) -> void* {
      CUdeviceptr p = 0;
      if (device.type != FERRY_DEVICE_CUDA || cu->cuMemAlloc(&p, length) != CUDA_SUCCESS)
        return nullptr;
      static_cast<CountingAllocator*>(ud)->allocs++;
      return reinterpret_cast<void*>(p);
    };
    c.free = [](void* ud, ferry_device_t, void* data, uint64_t) {
      cu->cuMemFree(reinterpret_cast<CUdeviceptr>(data));
      static_cast<CountingAllocator*>(ud)->frees++;
    };
  }
};

TEST_F(DeviceRpcTest, ReceivedDeviceTensorsComeFromTheApplicationsAllocator) {
  CountingAllocator alloc;
  try {
    Start("tcp,cuda_ipc", "tcp,cuda_ipc", &alloc.c);
  } catch (const ferry::Error& e) {
    GTEST_SKIP() << "no GPU: cuda_ipc does not start here: " << e.what();
  }
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(size_t{8} << 20, 5));
  auto reply = seed_->RpcSync("peer", "echo", std::move(p));
  EXPECT_EQ(alloc.allocs.load(), 1) << "the reply landed in the application's memory";
  DLManagedTensor* t = reply.TakeTensor(0);
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_TRUE(HasPattern(t, size_t{8} << 20, 5));
  t->deleter(t);
  EXPECT_EQ(alloc.frees.load(), 1) << "and went back to it once";
}

TEST_F(DeviceRpcTest, APeerWithoutCudaIpcGetsStagedTensors) {
  try {
    Start("tcp,cuda_ipc", "tcp");
  } catch (const ferry::Error& e) {
    GTEST_SKIP() << "no GPU: cuda_ipc does not start here: " << e.what();
  }
  const size_t n = size_t{64} << 20;
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(n, 7));
  auto reply = seed_->RpcSync("peer", "echo", std::move(p));
  DLManagedTensor* t = reply.TakeTensor(0);
  // The peer had no device support: it got (and sent back) host memory.
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCPU);
  EXPECT_TRUE(HasPattern(t, n, 7));
  t->deleter(t);
  const auto s = seed_->Stats();
  EXPECT_EQ(s.staged_messages, 1u);
  EXPECT_EQ(s.staged_bytes, n);
  EXPECT_EQ(s.device_messages, 0u);
}

TEST_F(DeviceRpcTest, WithoutCudaIpcADeviceTensorFailsAtOnce) {
  Start("tcp", "tcp");
  ferry::Payload p("x");
  p.Tensor(DeviceTensor(4096, 1));
  try {
    seed_->RpcSync("peer", "echo", std::move(p));
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_FAILED_PRECONDITION) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda_ipc"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g_deleted.load(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--device-rpc-peer") {
    return PeerMain(argv[2], argv[3], argv[4]);
  }
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  g_self_exe = n > 0 ? std::string(buf, static_cast<size_t>(n)) : argv[0];
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
