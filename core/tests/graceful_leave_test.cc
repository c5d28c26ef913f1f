// A worker that leaves gracefully answers the calls it is serving first.
// Its answers travel on its own connection to the caller; the news that it
// left travels from the store, on another connection, and can overtake
// them. The caller must not fail such a call with "left the job" while its
// reply is on the way. Here chaos holds back every message on the workers' connection
// (in order) while the store's news comes straight over tcp, so the news
// always wins the race.
//
// A call that reaches a worker while it leaves is answered PEER_GONE, the
// same answer as a call that finds it gone (docs/membership.md).
#include "chaos_worker_options.h"
#include "test_workers.h"

#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ferry_test::ChaosWorkerOptions;

TEST(GracefulLeave, RepliesSentBeforeLeavingArriveAfterTheStoresNews) {
  setenv("FERRY_CHAOS_INNER", "tcp", 0);
  setenv("FERRY_CHAOS_DELAY_US_MAX", "30000", 1);
  setenv("FERRY_CHAOS_REORDER", "0", 1);
  setenv("FERRY_CHAOS_DUP_RATE", "0", 1);
  for (int seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("chaos seed " + std::to_string(seed));
    setenv("FERRY_CHAOS_SEED", std::to_string(seed).c_str(), 1);
    const std::string job = "graceful-leave." + std::to_string(seed);
    ferry::Worker caller(ChaosWorkerOptions("caller", job, "127.0.0.1:0", true));
    ferry::Worker callee(
        ChaosWorkerOptions("callee", job, caller.store_address(), false));
    std::mutex mu;
    std::condition_variable cv;
    bool answered = false;
    callee.Register("answer", [&](ferry::Call& c, ferry::Message) {
      c.Reply(ferry::Payload("the answer"));
      std::lock_guard<std::mutex> l(mu);
      answered = true;
      cv.notify_all();
    });
    caller.WaitForWorkers(2, 10000ms);

    ferry::Future reply = caller.RpcAsync("callee", "answer");
    {
      std::unique_lock<std::mutex> l(mu);
      ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return answered; }));
    }
    // The reply is sent (and held back by chaos); leave now. The store
    // tells the caller at once.
    callee.Shutdown(5000ms);

    std::string got, error;
    try {
      got = std::string(reply.Get().bytes());
    } catch (const ferry::Error& e) {
      error = e.what();
    }
    EXPECT_EQ(got, "the answer") << "the call failed instead: " << error;
    // Once it left, a new call fails at once, and says why.
    try {
      caller.RpcSync("callee", "answer", ferry::Payload(), 2000ms);
      ADD_FAILURE() << "a call to a worker that left succeeded";
    } catch (const ferry::Error& e) {
      EXPECT_NE(std::string(e.what()).find("left the job"), std::string::npos)
          << e.what();
    }
  }
}

TEST(GracefulLeave, ACallReachingALeavingWorkerIsPeerGone) {
  const std::string job = ferry_test::JobName("graceful-leave");
  ferry::Worker caller(ferry_test::WorkerOptions("caller", job, "127.0.0.1:0", true));
  ferry::Worker callee(ferry_test::WorkerOptions("callee", job, caller.store_address()));
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, released = false;
  callee.Register(
      "hold",
      [&](ferry::Call& c, ferry::Message) {
        {
          std::unique_lock<std::mutex> l(mu);
          started = true;
          cv.notify_all();
          cv.wait_for(l, 30s, [&] { return released; });
        }
        c.Reply(ferry::Payload("held"));
      },
      FERRY_HANDLER_MAY_BLOCK);
  callee.Register("answer",
                  [](ferry::Call& c, ferry::Message) { c.Reply(ferry::Payload("42")); });
  caller.WaitForWorkers(2, 10000ms);

  ferry::Future held = caller.RpcAsync("callee", "hold");
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return started; }));
  }
  // It leaves gracefully: it finishes "hold" first, and answers every call
  // that reaches it meanwhile without running it.
  std::thread leaving([&] { callee.Shutdown(20000ms); });
  ferry_status_t code = FERRY_OK;
  std::string what;
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (code == FERRY_OK && std::chrono::steady_clock::now() < end) {
    try {
      caller.RpcSync("callee", "answer", ferry::Payload(), 2000ms);
    } catch (const ferry::Error& e) {
      code = e.code();
      what = e.what();
    }
  }
  EXPECT_EQ(code, FERRY_PEER_GONE) << what;
  EXPECT_EQ(what.rfind("worker 'callee' left the job", 0), 0u) << what;
  {
    std::lock_guard<std::mutex> l(mu);
    released = true;
    cv.notify_all();
  }
  EXPECT_EQ(std::string(held.Get().bytes()), "held");
  leaving.join();
}

}  // namespace
