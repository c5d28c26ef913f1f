// Typed C++ functions (ferry/typed.hpp) across two processes: a
// ferry-test-worker defines them (test_worker_main.cc), this process calls
// them with CallTyped: values, a tensor both ways, errors by status, a
// continuation chain, a deadline and a cancellation.
#include <ferry/typed.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_workers.h"

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;

class TypedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string job = ferry_test::JobName("typed_test");
    me_ = std::make_unique<ferry::Worker>(
        ferry_test::WorkerOptions("caller", job, "127.0.0.1:0", /*host_store=*/true));
    pid_ = ferry_test::SpawnPiped(
        FERRY_TEST_WORKER,
        {FERRY_TEST_WORKER, "--name", "server", "--store", me_->store_address(), "--job",
         job, "--secret", "test-secret"},
        environ, &to_child_, &from_child_);
    ASSERT_NE(ferry_test::ExpectLine(from_child_, &out_, {"READY"}, 30s), "")
        << "the server did not start";
  }
  void TearDown() override {
    close(to_child_);  // the server leaves
    int status = 0;
    waitpid(pid_, &status, 0);
    close(from_child_);
    me_->Shutdown(2s);
  }
  std::unique_ptr<ferry::Worker> me_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string out_;
};

TEST_F(TypedTest, ValuesOfTheirOwnTypes) {
  EXPECT_EQ(ferry::CallTyped<int64_t>(*me_, "server", "typed_add", int64_t{40}, 2).Get(),
            42);
  const std::string d =
      ferry::CallTyped<std::string>(*me_, "server", "typed_describe", std::string("w0"),
                                    std::vector<int64_t>{1, 2, 3},
                                    std::map<std::string, double>{{"a", 1.5}, {"b", 2.5}})
          .Get();
  EXPECT_EQ(d, "w0: 3 values, sum 6, 2 weights, total 4");
}

TEST_F(TypedTest, ATensorTravelsAsASegmentBothWays) {
  std::vector<float> v = {1.0f, 2.0f, 3.0f, 4.0f};
  std::atomic<bool> released{false};
  ferry::Tensor t =
      ferry::Tensor::FromBuffer(v.data(), {4}, DLDataType{kDLFloat, 32, 1},
                                DLDevice{kDLCPU, 0}, [&] { released = true; });
  ferry::Tensor back =
      ferry::CallTyped<ferry::Tensor>(*me_, "server", "typed_scale", std::move(t), 2.5)
          .Get();
  EXPECT_FALSE(t) << "passing a tensor hands it to ferry";
  ASSERT_TRUE(back);
  ASSERT_EQ(back.numel(), 4);
  EXPECT_EQ(back.dl().device.device_type, kDLCPU);
  const float* y = back.data<float>();
  EXPECT_FLOAT_EQ(y[0], 2.5f);
  EXPECT_FLOAT_EQ(y[3], 10.0f);
  EXPECT_FLOAT_EQ(v[0], 1.0f) << "the caller's buffer is not the callee's";
  EXPECT_TRUE(ferry_test::Eventually([&] { return released.load(); }))
      << "ferry released the caller's tensor once sent";
}

TEST_F(TypedTest, ErrorsKeepTheirStatusAndSayWhat) {
  try {
    ferry::CallTyped<int64_t>(*me_, "server", "typed_fail").Get();
    FAIL() << "typed_fail returned";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("nothing here, on purpose"), std::string::npos);
  }
  // Arguments that are not what the function takes: named types, no call.
  ferry::Result<int64_t> r =
      ferry::CallTyped<int64_t>(*me_, "server", "typed_add", std::string("x"), 2).Wait();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(std::string(r.error().what()).find("takes (int64, int64)"), std::string::npos)
      << r.error().what();
  // A result read as another type.
  ferry::Result<std::string> wrong =
      ferry::CallTyped<std::string>(*me_, "server", "typed_add", 1, 2).Wait();
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.code(), FERRY_INVALID_ARGUMENT);
  // A raw (untyped) function is not a typed one.
  ferry::Result<std::string> raw =
      ferry::CallTyped<std::string>(*me_, "server", "make", std::string("y")).Wait();
  ASSERT_FALSE(raw.ok());
  EXPECT_NE(std::string(raw.error().what()).find("not a typed payload"),
            std::string::npos)
      << raw.error().what();
}

TEST_F(TypedTest, ContinuationsReceiveTheValueOrTheErrorAndChain) {
  auto chained =
      ferry::CallTyped<int64_t>(*me_, "server", "typed_add", 20, 1)
          .Then([](const ferry::Result<int64_t>& r) { return r.value() * 2; })  // 42
          .Then([](const ferry::Result<int64_t>& r) {
            return std::to_string(r.value()) + "!";
          });
  EXPECT_EQ(chained.Get(), "42!");
  auto failed =
      ferry::CallTyped<int64_t>(*me_, "server", "typed_fail")
          .Then([](const ferry::Result<int64_t>& r) {
            return r.ok() ? std::string("value") : std::string(r.error().what());
          });
  EXPECT_NE(failed.Get().find("on purpose"), std::string::npos);
}

TEST_F(TypedTest, DeadlinesAndCancellationAsAnyCall) {
  ferry::Result<int64_t> late =
      ferry::CallTyped<int64_t>(*me_, "server", "typed_sleep", 200ms, int64_t{1000})
          .Wait();
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.code(), FERRY_DEADLINE_EXCEEDED) << late.error().what();
  auto f = ferry::CallTyped<int64_t>(*me_, "server", "typed_sleep", int64_t{1000});
  EXPECT_TRUE(f.Cancel());
  EXPECT_EQ(f.Wait().code(), FERRY_CANCELLED);
  // The server still answers (its sleeping handlers were told to give up).
  EXPECT_EQ(ferry::CallTyped<int64_t>(*me_, "server", "typed_add", 1, 1).Get(), 2);
}

}  // namespace
