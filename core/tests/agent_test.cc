// The core end to end inside one process: several workers, each with its
// own engine and real loopback tcp connections, through the public C++ API
// (ferry.hpp over libferry.so). Multi-process behaviour (kill -9, SIGSTOP,
// join-late across processes) is in worker_process_test.cc.
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include "test_workers.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ferry::Worker;

Worker::Options Opts(const std::string& name, const std::string& store,
                     bool host = false) {
  return ferry_test::WorkerOptions(name, ferry_test::JobName("agent_test"), store, host,
                                   "tcp", 1000ms, 10000ms);
}

using ferry_test::Eventually;

// A float32 tensor of n elements whose deleter counts calls.
std::atomic<int> g_deleted{0};
DLManagedTensor* MakeTensor(int64_t n, float base) {
  std::vector<float> data(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    data[static_cast<size_t>(i)] = base + static_cast<float>(i);
  return ferry_test::VectorTensor(std::move(data), DLDevice{kDLCPU, 0},
                                  DLDataType{kDLFloat, 32, 1}, &g_deleted);
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::make_unique<Worker>(Opts("seed", "127.0.0.1:0", true));
    store_ = seed_->store_address();
  }
  std::unique_ptr<Worker> Join(const std::string& name) {
    return std::make_unique<Worker>(Opts(name, store_));
  }
  std::unique_ptr<Worker> seed_;
  std::string store_;
};

void RegisterEcho(Worker& w) {
  w.Register("echo", [](ferry::Call& call, ferry::Message args) {
    ferry::Payload out{std::string(args.bytes())};
    for (uint32_t i = 0; i < args.num_tensors(); ++i) out.Tensor(args.TakeTensor(i));
    call.Reply(std::move(out));
  });
}

TEST_F(AgentTest, RpcSyncEchoesBytes) {
  auto w1 = Join("w1");
  RegisterEcho(*w1);
  auto reply = seed_->RpcSync("w1", "echo", ferry::Payload("hello"));
  EXPECT_EQ(reply.bytes(), "hello");
  // And the other way round, by id.
  RegisterEcho(*seed_);
  auto back = w1->RpcSync("#" + std::to_string(seed_->id()), "echo", ferry::Payload("x"));
  EXPECT_EQ(back.bytes(), "x");
}

TEST_F(AgentTest, TensorsArriveIntactAndDeletersRunOnce) {
  auto w1 = Join("w1");
  RegisterEcho(*w1);
  g_deleted = 0;
  const int64_t n = 1 << 20;  // 4 MiB: placed, not inline
  ferry::Payload p("t");
  p.Tensor(MakeTensor(n, 1.0f)).Tensor(MakeTensor(3, 7.0f));
  auto reply = seed_->RpcSync("w1", "echo", std::move(p));
  ASSERT_EQ(reply.num_tensors(), 2u);
  DLManagedTensor* big = reply.TakeTensor(0);
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(big->dl_tensor.ndim, 1);
  ASSERT_EQ(big->dl_tensor.shape[0], n);
  EXPECT_EQ(big->dl_tensor.dtype.code, kDLFloat);
  const float* d = static_cast<const float*>(big->dl_tensor.data);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[n - 1], 1.0f + static_cast<float>(n - 1));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 64, 0u)
      << "received tensors are 64-byte aligned";
  big->deleter(big);
  // The two sent tensors were released by ferry once sent, exactly once each.
  EXPECT_TRUE(Eventually([] { return g_deleted.load() == 2; }));
}

TEST_F(AgentTest, ErrorsAreClearStatuses) {
  auto w1 = Join("w1");
  RegisterEcho(*w1);
  w1->Register("fails", [](ferry::Call& call, ferry::Message) {
    call.Fail(FERRY_OUT_OF_RANGE, "index 7 is out of range");
  });
  w1->Register("throws",
               [](ferry::Call&, ferry::Message) { throw std::runtime_error("boom"); });
  try {
    seed_->RpcSync("w1", "nope");
    FAIL() << "unknown function must fail";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_NOT_FOUND);
    EXPECT_NE(std::string(e.what()).find("no function 'nope'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("echo"), std::string::npos) << e.what();
  }
  try {
    seed_->RpcSync("w1", "fails");
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_OUT_OF_RANGE);
    EXPECT_STREQ(e.what(), "index 7 is out of range");
  }
  try {
    seed_->RpcSync("w1", "throws");
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_UNKNOWN);
    EXPECT_STREQ(e.what(), "boom");
  }
  try {
    seed_->RpcSync("nobody", "echo", ferry::Payload(), 300ms);
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_NOT_FOUND);
    EXPECT_NE(std::string(e.what()).find("nobody"), std::string::npos);
  }
}

TEST_F(AgentTest, CallAfterShutdownFailsAtOnce) {
  auto w1 = Join("w1");
  RegisterEcho(*w1);
  seed_->Shutdown();
  try {
    seed_->RpcSync("w1", "echo");
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_FAILED_PRECONDITION);
    EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos);
  }
}

TEST_F(AgentTest, HandlerThatNeverAnswersTimesOut) {
  auto w1 = Join("w1");
  std::vector<ferry::Call> held;
  std::mutex mu;
  w1->Register("hold", [&](ferry::Call& call, ferry::Message) {
    std::lock_guard<std::mutex> l(mu);
    held.push_back(std::move(call));
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    seed_->RpcSync("w1", "hold", ferry::Payload(), 300ms);
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_DEADLINE_EXCEEDED) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  std::lock_guard<std::mutex> l(mu);
  held.clear();  // answering late is harmless
}

// The expiry timer scans the pending calls only once the earliest deadline
// among them may have passed. A short call started behind many long ones,
// and a call whose deadline comes after one that was answered early, must
// still expire on time.
TEST_F(AgentTest, EachCallExpiresAtItsOwnDeadlineAmongManyPending) {
  // Declared before the worker, so they outlive every handler call.
  std::vector<ferry::Call> held;
  std::mutex mu;
  auto w1 = Join("w1");
  RegisterEcho(*w1);
  w1->Register("hold", [&](ferry::Call& call, ferry::Message) {
    std::lock_guard<std::mutex> l(mu);
    held.push_back(std::move(call));
  });
  // Answered at once, so its deadline (the earliest) passes with nothing
  // due. Sent first: behind the 500 calls below it could miss its own
  // deadline on a slow machine (under ASan, with the CPUs shared).
  ferry::Future early = seed_->RpcAsync("w1", "echo", ferry::Payload("x"), 300ms);
  std::vector<ferry::Future> long_calls;
  for (int i = 0; i < 500; ++i) {
    long_calls.push_back(seed_->RpcAsync("w1", "hold", ferry::Payload(), 60000ms));
  }
  ferry::Future short_call = seed_->RpcAsync("w1", "hold", ferry::Payload(), 900ms);
  EXPECT_EQ(early.Get().bytes(), "x");
  ASSERT_TRUE(short_call.Wait(5000ms)) << "a 900 ms call was still pending after 5 s";
  try {
    short_call.Get();
    FAIL() << "a call nobody answers succeeded";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_DEADLINE_EXCEEDED) << e.what();
  }
  for (auto& f : long_calls) EXPECT_FALSE(f.done());  // still pending
  std::lock_guard<std::mutex> l(mu);
  held.clear();  // answers the long calls (with an error): nothing waits for them
}

TEST_F(AgentTest, AsyncCallsInFlightAndContinuations) {
  auto w1 = Join("w1");
  RegisterEcho(*w1);
  std::vector<ferry::Future> futures;
  std::atomic<int> continued{0};
  for (int i = 0; i < 64; ++i) {
    futures.push_back(seed_->RpcAsync("w1", "echo", ferry::Payload(std::to_string(i))));
  }
  for (auto& f : futures) f.Then([&] { continued.fetch_add(1); });
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(futures[static_cast<size_t>(i)].Get().bytes(), std::to_string(i));
  }
  // Continuations run on the completing thread, possibly just after a
  // waiter saw the future done: await them, then check none ran twice.
  EXPECT_TRUE(Eventually([&] { return continued.load() >= 64; }));
  EXPECT_EQ(continued.load(), 64);
}

TEST_F(AgentTest, AsyncHandlerAnswersFromAnotherThread) {
  auto w1 = Join("w1");
  // The reply may reach the caller before the handler has stored the
  // thread: wait for it to be stored before joining it.
  std::mutex mu;
  std::condition_variable stored;
  std::thread answerer;
  w1->Register("later", [&](ferry::Call& call, ferry::Message args) {
    std::lock_guard<std::mutex> l(mu);
    answerer =
        std::thread([c = std::move(call), s = std::string(args.bytes())]() mutable {
          c.Reply(ferry::Payload(s + "!"));
        });
    stored.notify_all();
  });
  EXPECT_EQ(seed_->RpcSync("w1", "later", ferry::Payload("hi")).bytes(), "hi!");
  std::unique_lock<std::mutex> l(mu);
  stored.wait(l, [&] { return answerer.joinable(); });
  answerer.join();
}

TEST_F(AgentTest, ACallJustAfterAJoinWaitsForItsFunctionToBeRegistered) {
  // A worker registers its functions right after it starts; a caller that
  // saw it join may call first. The call is held, not refused.
  auto w1 = Join("w1");
  ferry::Future f = seed_->RpcAsync("w1", "registered_late", ferry::Payload("x"));
  ASSERT_FALSE(f.Wait(std::chrono::milliseconds(50)));
  w1->Register("registered_late", [](ferry::Call& call, ferry::Message args) {
    call.Reply(ferry::Payload("late " + std::string(args.bytes())));
  });
  EXPECT_EQ(f.Get().bytes(), "late x");
}

TEST_F(AgentTest, NestedCallFromABlockingHandler) {
  auto w1 = Join("w1");
  auto w2 = Join("w2");
  RegisterEcho(*w2);
  Worker* self = w1.get();
  w1->Register(
      "relay",
      [self](ferry::Call& call, ferry::Message args) {
        auto r = self->RpcSync("w2", "echo", ferry::Payload(std::string(args.bytes())));
        call.Reply(ferry::Payload("relayed " + std::string(r.bytes())));
      },
      FERRY_HANDLER_MAY_BLOCK);
  // And inline (not flagged): the nested call drives progress itself.
  w1->Register("relay_inline", [self](ferry::Call& call, ferry::Message args) {
    auto r = self->RpcSync("w2", "echo", ferry::Payload(std::string(args.bytes())));
    call.Reply(ferry::Payload("inline " + std::string(r.bytes())));
  });
  EXPECT_EQ(seed_->RpcSync("w1", "relay", ferry::Payload("a")).bytes(), "relayed a");
  EXPECT_EQ(seed_->RpcSync("w1", "relay_inline", ferry::Payload("b")).bytes(),
            "inline b");
}

// Deadlines and cancellation reach the callee (docs/api.md).
TEST_F(AgentTest, AHandlerReadsItsDeadlineAndANestedCallInheritsIt) {
  auto w1 = Join("w1");
  auto w2 = Join("w2");
  // "left": the function name and the milliseconds left of the deadline.
  w2->Register("left", [](ferry::Call& call, ferry::Message) {
    const auto ms = call.remaining().count();
    call.Reply(ferry::Payload(call.function() + " " + std::to_string(ms)));
  });
  Worker* self = w1.get();
  w1->Register(
      "relay",
      [self](ferry::Call& call, ferry::Message args) {
        const auto own = std::chrono::milliseconds(std::stoi(std::string(args.bytes())));
        call.Reply(
            ferry::Payload(std::string(self->RpcSync("w2", "left", {}, own).bytes())));
      },
      FERRY_HANDLER_MAY_BLOCK);
  auto left = [](const std::string& reply) {
    EXPECT_EQ(reply.rfind("left ", 0), 0u) << reply;
    return std::stol(reply.substr(5));
  };
  const long direct = left(
      std::string(seed_->RpcSync("w1", "relay", ferry::Payload("0"), 3000ms).bytes()));
  EXPECT_GT(direct, 2000);  // inherited from the 3 s call
  EXPECT_LE(direct, 3000);
  const long own = left(std::string(
      seed_->RpcSync("w1", "relay", ferry::Payload("20000"), 3000ms).bytes()));
  EXPECT_GT(own, 19000);  // its own timeout wins
}

TEST_F(AgentTest, CancelReachesRunningHandlersAndQueuedCallsAreDropped) {
  auto w1 = Join("w1");
  // Blocking handlers (4 executor threads) that wait for the gate, then
  // report whether their caller gave up.
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> running{0}, saw_cancel{0};
  w1->Register(
      "gated",
      [&](ferry::Call& call, ferry::Message) {
        ++running;
        while (!call.cancelled()) std::this_thread::yield();
        ++saw_cancel;
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return open; });
        call.Reply();
      },
      FERRY_HANDLER_MAY_BLOCK);
  std::vector<ferry::Future> futs;
  for (int i = 0; i < 8; ++i) futs.push_back(seed_->RpcAsync("w1", "gated"));
  ASSERT_TRUE(Eventually([&] { return running.load() == 4; }));  // 4 queued
  // The queued ones first, so their CANCELs are there before the running
  // handlers see theirs.
  for (int i = 7; i >= 0; --i) {
    EXPECT_TRUE(futs[static_cast<size_t>(i)].Cancel());
    EXPECT_EQ(futs[static_cast<size_t>(i)].status(), FERRY_CANCELLED);
    EXPECT_FALSE(futs[static_cast<size_t>(i)].Cancel());  // done already
  }
  ASSERT_TRUE(Eventually([&] { return saw_cancel.load() == 4; }));
  {
    std::lock_guard<std::mutex> l(mu);
    open = true;
  }
  cv.notify_all();
  ASSERT_TRUE(Eventually([&] { return w1->Stats().dropped_calls == 4; }));
  EXPECT_EQ(running.load(), 4);  // the queued four never ran
  // And the worker serves on at once.
  RegisterEcho(*w1);
  EXPECT_EQ(seed_->RpcSync("w1", "echo", ferry::Payload("x")).bytes(), "x");
}

TEST_F(AgentTest, ACallToThisWorkerRunsOnTheExecutorUnderItsDeadline) {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> saw_cancel{0}, started{0};
  // Not flagged MAY_BLOCK: a call from a worker to itself still runs on the
  // executor, so the caller is never blocked by it.
  seed_->Register("gate", [&](ferry::Call& call, ferry::Message) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
    call.Reply(ferry::Payload("opened"));
  });
  seed_->Register("until_cancelled", [&](ferry::Call& call, ferry::Message) {
    ++started;
    while (!call.cancelled()) std::this_thread::yield();
    ++saw_cancel;
    call.Reply();
  });
  RegisterEcho(*seed_);
  ferry::Future f = seed_->RpcAsync("seed", "gate");  // returns at once
  EXPECT_FALSE(f.done());
  {
    std::lock_guard<std::mutex> l(mu);
    open = true;
  }
  cv.notify_all();
  EXPECT_EQ(f.Get().bytes(), "opened");
  EXPECT_EQ(
      seed_->RpcSync("#" + std::to_string(seed_->id()), "echo", ferry::Payload("me"))
          .bytes(),
      "me");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // The handler may see the deadline pass and answer just before the
    // caller's own timer ends the call: either way it stopped in time.
    seed_->RpcSync("seed", "until_cancelled", {}, 200ms);
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_DEADLINE_EXCEEDED) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(Eventually([&] { return saw_cancel.load() == 1; }));
  ferry::Future g = seed_->RpcAsync("seed", "until_cancelled");
  ASSERT_TRUE(Eventually([&] { return started.load() == 2; }));
  EXPECT_TRUE(g.Cancel());
  EXPECT_EQ(g.status(), FERRY_CANCELLED);
  // The handler saw it too (and is done with this test's variables).
  EXPECT_TRUE(Eventually([&] { return saw_cancel.load() == 2; }));
}

TEST_F(AgentTest, BlockingNestedCallsBothWaysDoNotDeadlock) {
  // 16 handlers on w1 each wait for w2, whose handlers each wait for w1
  // again: more than w1's 4 executor threads are blocked at once, so the
  // executor grows for the calls that must run there for them to finish.
  auto w1 = Join("w1");
  auto w2 = Join("w2");
  w1->Register(
      "leaf",
      [](ferry::Call& call, ferry::Message) { call.Reply(ferry::Payload("leaf")); },
      FERRY_HANDLER_MAY_BLOCK);
  Worker* p1 = w1.get();
  Worker* p2 = w2.get();
  w2->Register(
      "back",
      [p2](ferry::Call& call, ferry::Message) {
        call.Reply(ferry::Payload(std::string(p2->RpcSync("w1", "leaf").bytes())));
      },
      FERRY_HANDLER_MAY_BLOCK);
  w1->Register(
      "bounce",
      [p1](ferry::Call& call, ferry::Message) {
        call.Reply(ferry::Payload(std::string(p1->RpcSync("w2", "back").bytes())));
      },
      FERRY_HANDLER_MAY_BLOCK);
  std::vector<ferry::Future> futs;
  for (int i = 0; i < 16; ++i)
    futs.push_back(seed_->RpcAsync("w1", "bounce", {}, 10000ms));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& f : futs) EXPECT_EQ(f.Get().bytes(), "leaf");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST_F(AgentTest, MembershipIsVisibleWithTransportAndCallbacks) {
  std::mutex mu;
  std::vector<std::pair<std::string, int32_t>> events;
  seed_->OnMembership([&](const ferry::MemberView& m) {
    std::lock_guard<std::mutex> l(mu);
    events.push_back({m.name, m.state});
  });
  auto w1 = Join("w1");
  RegisterEcho(*w1);
  seed_->WaitForWorkers(2, 5000ms);
  seed_->RpcSync("w1", "echo");
  bool saw = false;
  for (const auto& m : seed_->Members()) {
    if (m.name == "w1") {
      saw = true;
      EXPECT_EQ(m.state, FERRY_MEMBER_ALIVE);
      EXPECT_EQ(m.transport, "tcp");
    }
    if (m.name == "seed") {
      EXPECT_EQ(m.transport, "self");
    }
  }
  EXPECT_TRUE(saw);
  w1->Shutdown();
  EXPECT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> l(mu);
    for (const auto& [n, s] : events) {
      if (n == "w1" && s == FERRY_MEMBER_LEFT) return true;
    }
    return false;
  }));
  std::lock_guard<std::mutex> l(mu);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front(), (std::pair<std::string, int32_t>{"w1", FERRY_MEMBER_ALIVE}));
}

TEST_F(AgentTest, ACallWaitsForAWorkerThatJoinsLate) {
  auto future = seed_->RpcAsync("late", "echo", ferry::Payload("waited"), 10000ms);
  std::unique_ptr<Worker> late;
  std::thread joiner([&] {
    late = Join("late");
    RegisterEcho(*late);
  });
  joiner.join();
  // Registered after joining: the first attempt may meet "no function";
  // what matters is that the call found the worker at all.
  std::string why;
  future.Wait(10000ms);
  const auto s = future.status(&why);
  EXPECT_TRUE(s == FERRY_OK ||
              (s == FERRY_NOT_FOUND && why.find("no function") != std::string::npos))
      << why;
  EXPECT_EQ(seed_->RpcSync("late", "echo", ferry::Payload("x")).bytes(), "x");
}

TEST_F(AgentTest, ANameRejoinsAsANewIncarnation) {
  auto w1 = Join("w1");
  const uint64_t id = w1->id();
  uint64_t inc1 = 0;
  for (const auto& m : seed_->Members())
    if (m.name == "w1") inc1 = m.incarnation;
  w1->Shutdown();
  w1.reset();
  auto again = Join("w1");
  EXPECT_EQ(again->id(), id) << "a name keeps its id";
  EXPECT_TRUE(Eventually([&] {
    for (const auto& m : seed_->Members()) {
      if (m.name == "w1" && m.state == FERRY_MEMBER_ALIVE && m.incarnation == inc1 + 1)
        return true;
    }
    return false;
  }));
  RegisterEcho(*again);
  EXPECT_EQ(seed_->RpcSync("w1", "echo", ferry::Payload("new")).bytes(), "new");
}

TEST_F(AgentTest, ALiveNameCannotJoinTwice) {
  auto w1 = Join("w1");
  try {
    Join("w1");
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_ALREADY_EXISTS);
    EXPECT_NE(std::string(e.what()).find("already in the job"), std::string::npos)
        << e.what();
  }
}

TEST_F(AgentTest, AWrongSecretIsRefusedBeforeAnyHandlerRuns) {
  std::atomic<int> ran{0};
  seed_->Register("count", [&](ferry::Call& c, ferry::Message) {
    ran.fetch_add(1);
    c.Reply();
  });
  auto o = Opts("intruder", store_);
  o.secret = "not-the-secret";
  o.join_timeout = 3000ms;
  try {
    Worker intruder(o);
    FAIL() << "joined with a wrong secret";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_UNAUTHENTICATED) << e.what();
    EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ran.load(), 0);
  EXPECT_TRUE(Eventually([&] { return seed_->Stats().refused_connections >= 1; }))
      << "the store refused (and logged) the intruder";
}

TEST_F(AgentTest, RemoteRefToHereAndOwnerDeletesWhenUserReleases) {
  auto w1 = Join("w1");
  w1->Register("make", [](ferry::Call& call, ferry::Message args) {
    call.Reply(ferry::Payload("value:" + std::string(args.bytes())));
  });
  {
    ferry::RRef r = seed_->Remote("w1", "make", ferry::Payload("42"));
    EXPECT_FALSE(r.is_owner());
    EXPECT_EQ(r.owner_id(), w1->id());
    EXPECT_EQ(r.ToHere().bytes(), "value:42");
    EXPECT_EQ(w1->Stats().owned_rrefs, 1u);
  }
  // G1: the owner hears of the delete and frees the value.
  EXPECT_TRUE(Eventually([&] { return w1->Stats().owned_rrefs == 0; }));
  EXPECT_TRUE(Eventually([&] { return seed_->Stats().user_rrefs == 0; }));
}

TEST_F(AgentTest, RemoteFailureSurfacesInToHere) {
  auto w1 = Join("w1");
  ferry::RRef r = seed_->Remote("w1", "missing");
  try {
    r.ToHere();
    FAIL();
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_NOT_FOUND);
  }
}

TEST_F(AgentTest, OwnerMutatesInPlaceAndUsersSeeIt) {
  auto w1 = Join("w1");
  std::unique_ptr<ferry::RRef> kept;
  std::mutex mu;
  // w1 creates a local RRef and hands it out as a return value (owner -> user).
  w1->Register("share", [&](ferry::Call& call, ferry::Message) {
    std::lock_guard<std::mutex> l(mu);
    ferry::Payload p("here");
    p.Ref(*kept);
    call.Reply(std::move(p));
  });
  kept = std::make_unique<ferry::RRef>(w1->CreateRRef(ferry::Payload("aaaa")));
  ferry::Message m = seed_->RpcSync("w1", "share");
  ASSERT_EQ(m.num_rrefs(), 1u);
  ferry::RRef user = m.TakeRRef(0);
  EXPECT_EQ(user.ToHere().bytes(), "aaaa");
  uint64_t n = 0;
  char* bytes = kept->MutableLocalBytes(&n);
  ASSERT_EQ(n, 4u);
  std::memcpy(bytes, "bbbb", 4);
  EXPECT_EQ(user.ToHere().bytes(), "bbbb");
  // The owner's own handle goes; the user's fork keeps the value alive.
  {
    std::lock_guard<std::mutex> l(mu);
    kept.reset();
  }
  EXPECT_EQ(w1->Stats().owned_rrefs, 1u);
  EXPECT_EQ(user.ToHere().bytes(), "bbbb");
  user = ferry::RRef();
  EXPECT_TRUE(Eventually([&] { return w1->Stats().owned_rrefs == 0; }));
}

// owner -> A -> Y -> Z, each fork passed as an argument; every user
// releases at once; the owner frees the value only after the last one.
TEST_F(AgentTest, ForkChainAcrossFourWorkers) {
  auto owner = Join("owner");
  auto a = Join("A");
  auto y = Join("Y");
  auto z = Join("Z");
  owner->Register("make",
                  [](ferry::Call& c, ferry::Message) { c.Reply(ferry::Payload("v")); });
  std::mutex mu;
  std::vector<ferry::RRef> held;  // forks each worker keeps
  auto keep_and_forward = [&](Worker* self, const std::string& next) {
    return [&, self, next](ferry::Call& call, ferry::Message args) {
      ferry::RRef r = args.TakeRRef(0);
      if (!next.empty()) {
        ferry::Payload p;
        p.Ref(r);
        self->RpcSync(next, "take", std::move(p));
      }
      std::string v(r.ToHere().bytes());
      {
        std::lock_guard<std::mutex> l(mu);
        held.push_back(std::move(r));
      }
      call.Reply(ferry::Payload(v));
    };
  };
  a->Register("take", keep_and_forward(a.get(), "Y"), FERRY_HANDLER_MAY_BLOCK);
  y->Register("take", keep_and_forward(y.get(), "Z"), FERRY_HANDLER_MAY_BLOCK);
  z->Register("take", keep_and_forward(z.get(), ""), FERRY_HANDLER_MAY_BLOCK);
  {
    ferry::RRef root = seed_->Remote("owner", "make");
    ferry::Payload p;
    p.Ref(root);
    EXPECT_EQ(seed_->RpcSync("A", "take", std::move(p)).bytes(), "v");
  }
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(held.size(), 3u);
  }
  EXPECT_EQ(owner->Stats().owned_rrefs, 1u) << "users still hold forks";
  {
    std::lock_guard<std::mutex> l(mu);
    held.clear();
  }
  EXPECT_TRUE(Eventually([&] { return owner->Stats().owned_rrefs == 0; }));
  for (Worker* w : {seed_.get(), a.get(), y.get(), z.get()}) {
    EXPECT_TRUE(Eventually([&] {
      auto s = w->Stats();
      return s.user_rrefs == 0 && s.pending_children == 0 && s.pending_controls == 0;
    })) << w->name();
  }
}

}  // namespace

namespace {
TEST_F(AgentTest, ToHereOnTheOwnerReturnsACopy) {
  ferry::RRef mine = seed_->CreateRRef(ferry::Payload("local"));
  EXPECT_TRUE(mine.is_owner());
  EXPECT_EQ(mine.ToHere().bytes(), "local");
  EXPECT_EQ(mine.ToHere().bytes(), "local");
}
}  // namespace
