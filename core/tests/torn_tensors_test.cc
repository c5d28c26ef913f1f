// No torn tensors, from C++ across real processes: what arrives is what a
// host tensor held when RpcAsync returned (an argument) or when Reply
// returned (a result), however the memory is written afterwards; the
// zero-copy opt-in (Payload::ZeroCopy, ferry_payload_t.zero_copy) sends
// from the tensor's own memory. The peer is a ferry-test-worker process
// (test_worker_main.cc: "echo", and "call", which calls back into this
// process).
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_workers.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;

constexpr size_t kFloats = size_t{2} << 20;  // 8 MiB of float32
constexpr int kRuns = 5;

// A tensor over memory the test keeps (a user's buffer): its deleter only
// counts, so the test may write the memory whenever ferry let it go.
struct Borrowed {
  DLManagedTensor t{};
  int64_t shape[1];
  std::atomic<int> deleted{0};
  DLManagedTensor* Over(std::vector<float>& v) {
    shape[0] = static_cast<int64_t>(v.size());
    ferry_test::SetTensor1D(t.dl_tensor, v.data(), shape, DLDevice{kDLCPU, 0},
                            DLDataType{kDLFloat, 32, 1});
    t.manager_ctx = this;
    t.deleter = [](DLManagedTensor* self) {
      static_cast<Borrowed*>(self->manager_ctx)->deleted.fetch_add(1);
    };
    return &t;
  }
};

// Elements of a received float tensor that are not `value`.
size_t Changed(DLManagedTensor* t, float value) {
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return SIZE_MAX;
  const auto* p = static_cast<const float*>(t->dl_tensor.data);
  size_t n = 1, changed = 0;
  for (int i = 0; i < t->dl_tensor.ndim; ++i)
    n *= static_cast<size_t>(t->dl_tensor.shape[i]);
  for (size_t i = 0; i < n; ++i) changed += p[i] != value;
  t->deleter(t);
  return changed;
}

class Child {
 public:
  Child(const std::string& name, const std::string& store, const std::string& job) {
    pid_ = ferry_test::SpawnPiped(
        FERRY_TEST_WORKER,
        {FERRY_TEST_WORKER, "--name", name, "--store", store, "--job", job, "--secret",
         "test-secret", "--peer-timeout-ms", "1000"},
        environ, &stdin_, &stdout_);
  }
  ~Child() {
    close(stdin_);
    int status = 0;
    waitpid(pid_, &status, 0);
    close(stdout_);
  }
  bool Ready() {
    std::string line;
    char c;
    pollfd p{stdout_, POLLIN, 0};
    while (poll(&p, 1, 15000) > 0 && read(stdout_, &c, 1) == 1) {
      if (c == '\n') return line.rfind("READY", 0) == 0;
      line += c;
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
};

class TornTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string job = ferry_test::JobName("torn");
    seed_ = std::make_unique<ferry::Worker>(
        ferry_test::WorkerOptions("seed", job, "127.0.0.1:0", /*host_store=*/true));
    child_ = std::make_unique<Child>("peer", seed_->store_address(), job);
    ASSERT_TRUE(child_->Ready());
    seed_->WaitForWorkers(2, 20000ms);
  }
  void TearDown() override {
    child_.reset();
    seed_.reset();
  }
  std::unique_ptr<ferry::Worker> seed_;
  std::unique_ptr<Child> child_;
};

TEST_F(TornTensorsTest, ArgumentWrittenAfterRpcAsyncArrivesAsItWas) {
  for (int run = 0; run < kRuns; ++run) {
    std::vector<float> x(kFloats, 0.0f);
    Borrowed b;
    auto f = seed_->RpcAsync("peer", "echo", ferry::Payload().Tensor(b.Over(x)), 20000ms);
    // Ferry copied x and let it go before RpcAsync returned.
    EXPECT_EQ(b.deleted.load(), 1);
    for (float& v : x) v += 1.0f;
    ferry::Message r = f.Get();
    ASSERT_EQ(r.num_tensors(), 1u);
    EXPECT_EQ(Changed(r.TakeTensor(0), 0.0f), 0u) << "run " << run;
  }
}

TEST_F(TornTensorsTest, ZeroCopyOptInSendsFromTheTensorWithoutACopy) {
  std::vector<float> x(kFloats, 0.0f);
  const auto before = seed_->Stats();
  Borrowed b;
  auto f = seed_->RpcAsync("peer", "echo", ferry::Payload().Tensor(b.Over(x)).ZeroCopy(),
                           20000ms);
  ferry::Message r = f.Get();  // x untouched until the future is done: the contract
  ASSERT_EQ(r.num_tensors(), 1u);
  EXPECT_EQ(Changed(r.TakeTensor(0), 0.0f), 0u);
  EXPECT_TRUE(ferry_test::Eventually([&] { return b.deleted.load() == 1; }));
  const auto after = seed_->Stats();
  EXPECT_EQ(after.snapshot_tensors, before.snapshot_tensors);
  EXPECT_EQ(after.snapshot_bytes, before.snapshot_bytes);
  // RpcSync needs no copy either: the caller waits for the reply.
  Borrowed b2;
  r = seed_->RpcSync("peer", "echo", ferry::Payload().Tensor(b2.Over(x)), 20000ms);
  EXPECT_EQ(Changed(r.TakeTensor(0), 0.0f), 0u);
  EXPECT_EQ(seed_->Stats().snapshot_tensors, before.snapshot_tensors);
  // The default copies once, every byte.
  Borrowed b3;
  seed_->RpcAsync("peer", "echo", ferry::Payload().Tensor(b3.Over(x)), 20000ms).Get();
  EXPECT_EQ(seed_->Stats().snapshot_tensors, before.snapshot_tensors + 1);
  EXPECT_EQ(seed_->Stats().snapshot_bytes, before.snapshot_bytes + kFloats * 4);
}

TEST_F(TornTensorsTest, ResultWrittenRightAfterReplyArrivesAsItWas) {
  // A parameter server's weights: it answers with them, then updates them.
  std::vector<float> weights(kFloats, 0.0f);
  Borrowed b;
  std::atomic<int> updated{0};  // handlers that finished their update
  seed_->Register("weights", [&](ferry::Call& call, ferry::Message) {
    std::fill(weights.begin(), weights.end(), 0.0f);
    b.deleted = 0;
    call.Reply(ferry::Payload().Tensor(b.Over(weights)));
    for (float& v : weights) v += 1.0f;  // right after the reply
    updated.fetch_add(1);
  });
  for (int run = 0; run < kRuns; ++run) {
    // The peer calls back into this process ("call") and answers with what
    // it got.
    ferry::Message r =
        seed_->RpcSync("peer", "call", ferry::Payload("seed weights x"), 20000ms);
    ASSERT_EQ(r.num_tensors(), 1u);
    EXPECT_EQ(Changed(r.TakeTensor(0), 0.0f), 0u) << "run " << run;
  }
  // The last handler may still be updating `weights` after its reply
  // reached us: it must be done before `weights` goes.
  EXPECT_TRUE(ferry_test::Eventually([&] { return updated.load() == kRuns; }));
}

}  // namespace
