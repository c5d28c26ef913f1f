// Static and elastic jobs across real processes (docs/membership.md): a
// static job's start waits for every rank, ranks come from the options or
// from WORLD_SIZE / RANK, a rank is claimed once, graceful shutdown is a
// job-wide barrier (torch's pattern, its timeout, a death before it, the
// non-graceful leave), and an unknown name fails at once in a static job
// but is waited for in an elastic one. Rank 0 is a worker in the test
// process (the C++ API); the others are ferry-static-worker processes
// (static_worker_main.cc) driven through their stdin and stdout.
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_workers.h"

#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             Clock::now().time_since_epoch())
      .count();
}

std::string JobName() {
  return ferry_test::JobName("static_test");
}

// One ferry-static-worker process: commands on its stdin, lines awaited on
// its stdout.
class Child {
 public:
  Child(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), FERRY_STATIC_WORKER);
    // The test's own environment without any WORLD_SIZE / RANK, plus `env`.
    std::vector<std::string> envs = ferry_test::ChildEnvironment(environ, env);
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ferry_test::SpawnPiped(FERRY_STATIC_WORKER, std::move(args), envp.data(),
                                  &stdin_, &stdout_);
  }
  ~Child() {
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdout_);
  }
  void Send(const std::string& line) {
    const std::string l = line + "\n";
    ASSERT_EQ(write(stdin_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  // The next stdout line starting with one of `prefixes` ("" on timeout).
  std::string Expect(const std::vector<std::string>& prefixes,
                     std::chrono::milliseconds limit = 20000ms) {
    return ferry_test::ExpectLine(stdout_, &buf_, prefixes, limit);
  }
  std::string Started() { return Expect({"STARTED", "START_FAILED"}); }
  std::string ShutdownLine() { return Expect({"SHUTDOWN"}); }
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int Exit() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string buf_;
};

// "t=<ms>" in a SHUTDOWN line.
long long TimeIn(const std::string& line) {
  const size_t at = line.find("t=");
  return at == std::string::npos ? -1 : std::stoll(line.substr(at + 2));
}

class StaticJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = "127.0.0.1:" + std::to_string(ferry_test::FreePort());
  }

  ferry::Worker::Options Options(int rank, int world_size) {
    ferry::Worker::Options o = ferry_test::WorkerOptions("worker" + std::to_string(rank),
                                                         JobName(), store_, rank == 0);
    o.world_size = static_cast<uint32_t>(world_size);
    o.rank = rank;
    o.start_timeout = 30000ms;
    return o;
  }
  // Rank 0 here, hosting the store; its start returns once all joined.
  std::future<std::unique_ptr<ferry::Worker>> StartRank0(int world_size) {
    ferry::Worker::Options o = Options(0, world_size);
    return std::async(std::launch::async,
                      [o] { return std::make_unique<ferry::Worker>(o); });
  }
  std::unique_ptr<Child> Spawn(int rank, int world_size,
                               std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--name",       "worker" + std::to_string(rank),
                                     "--store",      store_,
                                     "--job",        JobName(),
                                     "--world-size", std::to_string(world_size),
                                     "--rank",       std::to_string(rank)};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<Child>(args);
  }
  // Rank 0 here and ranks 1..world_size-1 as processes, all started.
  void StartJob(int world_size) {
    auto f0 = StartRank0(world_size);
    for (int r = 1; r < world_size; ++r) children_.push_back(Spawn(r, world_size));
    w0_ = f0.get();
    for (int r = 1; r < world_size; ++r) {
      ASSERT_EQ(children_[r - 1]->Started(), "STARTED rank=" + std::to_string(r) +
                                                 " world=" + std::to_string(world_size) +
                                                 " id=" + std::to_string(r + 1));
    }
  }
  Child& child(int rank) { return *children_[rank - 1]; }

  std::string store_;
  std::unique_ptr<ferry::Worker> w0_;
  std::vector<std::unique_ptr<Child>> children_;
};

TEST_F(StaticJobTest, StartWaitsForEveryRankIncludingALateOne) {
  auto f0 = StartRank0(3);
  auto c1 = Spawn(1, 3);
  // Rank 2 is not there yet: nobody's start may return. (A bounded look,
  // not a synchronisation: it passes only if start keeps waiting.)
  EXPECT_EQ(f0.wait_for(500ms), std::future_status::timeout);
  EXPECT_EQ(c1->Expect({"STARTED"}, 10ms), "");
  const long long late = NowMs();
  auto c2 = Spawn(2, 3);
  w0_ = f0.get();
  EXPECT_GE(NowMs(), late);
  EXPECT_EQ(c1->Started(), "STARTED rank=1 world=3 id=2");
  EXPECT_EQ(c2->Started(), "STARTED rank=2 world=3 id=3");

  // The C++ view: rank, world_size, the members' ranks (id = rank + 1).
  EXPECT_EQ(w0_->rank(), 0);
  EXPECT_EQ(w0_->world_size(), 3u);
  EXPECT_EQ(w0_->id(), 1u);
  auto members = w0_->Members();
  ASSERT_EQ(members.size(), 3u);
  for (const auto& m : members) {
    EXPECT_EQ(m.name, "worker" + std::to_string(m.rank));
    EXPECT_EQ(m.id, static_cast<uint64_t>(m.rank) + 1);
  }
  // A 0.1 caller's array (struct_size not set): the old element size, no rank.
  const size_t old_size = FERRY_STRUCT_SIZE(ferry_member_t, transport);
  std::vector<unsigned char> raw(old_size * 3 + 8, 0xAB);
  std::memset(raw.data(), 0, sizeof(uint32_t));
  uint32_t n = 0;
  ASSERT_EQ(ferry_worker_members(w0_->get(),
                                 reinterpret_cast<ferry_member_t*>(raw.data()), 3, &n),
            FERRY_OK);
  ASSERT_EQ(n, 3u);
  for (size_t i = 0; i < 3; ++i) {
    ferry_member_t m{};
    std::memcpy(&m, raw.data() + i * old_size, old_size);
    EXPECT_EQ(m.struct_size, old_size);
    EXPECT_GE(m.id, 1u);
    EXPECT_LE(m.id, 3u);
  }
  EXPECT_EQ(raw[old_size * 3], 0xAB) << "wrote past a 0.1 caller's array";

  c1->Send("shutdown none");
  c2->Send("shutdown none");
  w0_->Shutdown(ferry::ShutdownMode::kGraceful);
  EXPECT_EQ(c1->ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
  EXPECT_EQ(c2->ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
}

// A worker that joined and left (its own start gave up) still counts as
// joined: the others' start returns; its name stays known (PEER_GONE, not
// NOT_FOUND), also to a worker that joined after it left; and since it
// never reached shutdown, the barrier fails at once naming it.
TEST_F(StaticJobTest, AWorkerThatJoinedAndLeftCountsAsJoined) {
  auto f0 = StartRank0(3);
  auto c1 = Spawn(1, 3, {"--start-timeout-ms", "300"});
  const std::string gave_up = c1->Started();
  EXPECT_EQ(gave_up.rfind("START_FAILED DEADLINE_EXCEEDED", 0), 0u) << gave_up;
  EXPECT_NE(gave_up.find("rank 2 did not join"), std::string::npos) << gave_up;
  auto c2 = Spawn(2, 3);
  w0_ = f0.get();
  EXPECT_EQ(c2->Started(), "STARTED rank=2 world=3 id=3");
  c2->Send("call worker1 echo x");
  const std::string call = c2->Expect({"CALL"});
  EXPECT_EQ(call.rfind("CALL_FAILED PEER_GONE", 0), 0u) << call;
  bool seen = false;
  for (const auto& m : w0_->Members()) {
    if (m.name != "worker1") continue;
    seen = true;
    EXPECT_EQ(m.state, FERRY_MEMBER_LEFT);
    EXPECT_EQ(m.rank, 1);
  }
  EXPECT_TRUE(seen);
  c2->Send("shutdown none");
  const std::string line = c2->ShutdownLine();
  EXPECT_EQ(line.rfind("SHUTDOWN_FAILED PEER_GONE", 0), 0u) << line;
  EXPECT_NE(line.find("'worker1' (rank 1) left without reaching shutdown"),
            std::string::npos)
      << line;
  try {
    w0_->Shutdown(ferry::ShutdownMode::kGraceful);
    FAIL() << "the barrier completed without rank 1";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_PEER_GONE) << e.what();
  }
}

TEST_F(StaticJobTest, StartTimesOutNamingTheMissingRanks) {
  auto o = Options(0, 3);
  o.start_timeout = 1000ms;
  auto c1 = Spawn(1, 3, {"--start-timeout-ms", "1000"});
  try {
    ferry::Worker w(o);
    FAIL() << "start returned without rank 2";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_DEADLINE_EXCEEDED) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 2 did not join"), std::string::npos)
        << e.what();
  }
  const std::string line = c1->Started();
  EXPECT_EQ(line.rfind("START_FAILED", 0), 0u) << line;
}

TEST_F(StaticJobTest, RankAndWorldSizeFromTheEnvironment) {
  // As torchrun starts them: WORLD_SIZE and RANK, no world size given.
  Child c0({"--name", "a", "--store", store_, "--job", JobName(), "--host-store", "1"},
           {"WORLD_SIZE=2", "RANK=0"});
  Child c1({"--name", "b", "--store", store_, "--job", JobName()},
           {"WORLD_SIZE=2", "RANK=1"});
  EXPECT_EQ(c0.Started(), "STARTED rank=0 world=2 id=1");
  EXPECT_EQ(c1.Started(), "STARTED rank=1 world=2 id=2");
  c0.Send("call b echo hi");
  EXPECT_EQ(c0.Expect({"CALL"}), "CALL OK hi");
  c0.Send("shutdown none");
  c1.Send("shutdown none");
  EXPECT_EQ(c0.ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
  EXPECT_EQ(c1.ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);

  // WORLD_SIZE without RANK: refused before joining anything.
  Child bad({"--name", "c", "--store", store_, "--job", JobName()}, {"WORLD_SIZE=2"});
  const std::string why = bad.Started();
  EXPECT_EQ(why.rfind("START_FAILED INVALID_ARGUMENT", 0), 0u) << why;
  EXPECT_NE(why.find("RANK is not set"), std::string::npos) << why;

  // The elastic flag wins over the environment; no world size, no rank.
  Child elastic({"--name", "d", "--store", "127.0.0.1:0", "--job", JobName() + ".e",
                 "--host-store", "1", "--elastic", "1"},
                {"WORLD_SIZE=2", "RANK=1"});
  EXPECT_EQ(elastic.Started().rfind("STARTED rank=-1 world=0 id=", 0), 0u);
}

TEST_F(StaticJobTest, DuplicateRankAndWrongWorldSizeAreRefused) {
  StartJob(2);
  Child dup({"--name", "other", "--store", store_, "--job", JobName(), "--world-size",
             "2", "--rank", "1"});
  std::string why = dup.Started();
  EXPECT_EQ(why.rfind("START_FAILED ALREADY_EXISTS", 0), 0u) << why;
  EXPECT_NE(why.find("rank 1 is already taken by worker 'worker1'"), std::string::npos)
      << why;
  Child size({"--name", "x", "--store", store_, "--job", JobName(), "--world-size", "3",
              "--rank", "2"});
  why = size.Started();
  EXPECT_EQ(why.rfind("START_FAILED INVALID_ARGUMENT", 0), 0u) << why;
  EXPECT_NE(why.find("world_size 3"), std::string::npos) << why;
  EXPECT_NE(why.find("static with world_size 2"), std::string::npos) << why;
  Child elastic({"--name", "y", "--store", store_, "--job", JobName()});
  why = elastic.Started();
  EXPECT_EQ(why.rfind("START_FAILED INVALID_ARGUMENT", 0), 0u) << why;
  // A rank outside the world: refused here, before any store is asked.
  auto o = Options(5, 2);
  o.host_store = false;
  try {
    ferry::Worker w(o);
    FAIL() << "rank 5 of 2 started";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_INVALID_ARGUMENT) << e.what();
  }
  child(1).Send("shutdown none");
  w0_->Shutdown(ferry::ShutdownMode::kGraceful);
  EXPECT_EQ(child(1).ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
}

// torch's canonical program: rank 0 calls the others, which reach shutdown
// at once; every call succeeds and nobody's shutdown returns before the
// last call finished.
TEST_F(StaticJobTest, TorchPatternShutdownWaitsForTheLastCall) {
  StartJob(3);
  child(1).Send("shutdown none");
  child(2).Send("shutdown none");
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(w0_->RpcSync("worker1", "echo", ferry::Payload("a")).bytes(), "a");
    EXPECT_EQ(w0_->RpcSync("worker2", "echo", ferry::Payload("b")).bytes(), "b");
  }
  // A handler of a worker in the barrier calls another one in it.
  EXPECT_EQ(
      w0_->RpcSync("worker1", "call", ferry::Payload("worker2 echo nested")).bytes(),
      "nested");
  // Calls still running when this worker reaches shutdown: its shutdown
  // lets them finish first.
  // The clock is read before the calls go out: a callee may start its
  // 300 ms as soon as a call is sent, before this thread runs again.
  const long long before_calls = NowMs();
  std::vector<ferry::Future> slow;
  slow.push_back(w0_->RpcAsync("worker1", "slow", ferry::Payload("300")));
  slow.push_back(w0_->RpcAsync("worker2", "slow", ferry::Payload("300")));
  w0_->Shutdown(ferry::ShutdownMode::kGraceful);
  for (auto& f : slow) {
    ASSERT_TRUE(f.Wait(0ms));
    std::string why;
    EXPECT_EQ(f.status(&why), FERRY_OK) << why;
  }
  for (int r = 1; r <= 2; ++r) {
    const std::string line = child(r).ShutdownLine();
    EXPECT_EQ(line.rfind("SHUTDOWN OK", 0), 0u) << line;
    // The slow calls started before rank 0's shutdown and took 300 ms.
    EXPECT_GE(TimeIn(line), before_calls + 300) << line;
    EXPECT_EQ(child(r).Exit(), 0);
  }
}

TEST_F(StaticJobTest, BarrierTimeoutNamesWhoDidNotArrive) {
  StartJob(3);
  child(1).Send("shutdown 1000");
  const std::string line = child(1).ShutdownLine();
  EXPECT_EQ(line.rfind("SHUTDOWN_FAILED DEADLINE_EXCEEDED", 0), 0u) << line;
  EXPECT_NE(line.find("workers 'worker0' (rank 0), 'worker2' (rank 2) did not reach "
                      "shutdown within 1 s"),
            std::string::npos)
      << line;
  // Rank 1 reached shutdown before it left: the others can still finish.
  child(2).Send("shutdown none");
  w0_->Shutdown(ferry::ShutdownMode::kGraceful, 20000ms);
  EXPECT_EQ(child(2).ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
}

TEST_F(StaticJobTest, AWorkerKilledBeforeShutdownEndsTheBarrierWithPeerGone) {
  StartJob(3);
  child(1).Send("shutdown none");
  child(2).Kill();
  try {
    w0_->Shutdown(ferry::ShutdownMode::kGraceful);  // no timeout: must not hang
    FAIL() << "the barrier completed without rank 2";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_PEER_GONE) << e.what();
    EXPECT_NE(std::string(e.what()).find("'worker2' (rank 2) is gone before reaching "
                                         "shutdown"),
              std::string::npos)
        << e.what();
  }
  const std::string line = child(1).ShutdownLine();
  EXPECT_EQ(line.rfind("SHUTDOWN_FAILED PEER_GONE", 0), 0u) << line;
  EXPECT_NE(line.find("'worker2' (rank 2)"), std::string::npos) << line;
}

TEST_F(StaticJobTest, ImmediateShutdownLeavesAtOnce) {
  StartJob(2);
  // Rank 0 is nowhere near shutdown: an immediate leave waits for nobody.
  child(1).Send("immediate");
  EXPECT_EQ(child(1).ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
  EXPECT_EQ(child(1).Exit(), 0);
  try {
    w0_->RpcSync("worker1", "echo", ferry::Payload("x"), 10000ms);
    FAIL() << "a call to a worker that left succeeded";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_PEER_GONE) << e.what();
  }
  try {
    w0_->Shutdown(ferry::ShutdownMode::kGraceful);
    FAIL() << "the barrier completed without rank 1";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_PEER_GONE) << e.what();
    EXPECT_NE(
        std::string(e.what()).find("'worker1' (rank 1) left without reaching shutdown"),
        std::string::npos)
        << e.what();
  }
}

TEST_F(StaticJobTest, UnknownNameFailsAtOnceInAStaticJob) {
  StartJob(2);
  const auto t0 = Clock::now();
  try {
    w0_->RpcSync("nobody", "echo", ferry::Payload(), 60000ms);
    FAIL() << "a call to an unknown name succeeded";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("'worker0' (rank 0), 'worker1' (rank 1)"),
              std::string::npos)
        << e.what();
  }
  try {
    w0_->Remote("nobody", "echo", ferry::Payload(), 60000ms);
    FAIL() << "remote() to an unknown name succeeded";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_NOT_FOUND) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, 30000ms) << "it waited for the deadline";
  child(1).Send("shutdown none");
  w0_->Shutdown(ferry::ShutdownMode::kGraceful);
  EXPECT_EQ(child(1).ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
}

TEST(ElasticJobTest, UnknownNameIsWaitedForInAnElasticJob) {
  // No peer timeout of its own (0: the library's default).
  ferry::Worker::Options o = ferry_test::WorkerOptions("seed", JobName(), "127.0.0.1:0",
                                                       /*host_store=*/true, "tcp", 0ms);
  o.elastic = true;
  ferry::Worker seed(o);
  EXPECT_EQ(seed.rank(), -1);
  EXPECT_EQ(seed.world_size(), 0u);
  EXPECT_EQ(ferry_worker_shutdown_ex(seed.get(), 1u << 7, 0), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ferry_last_error()).find("unknown flags"), std::string::npos);
  // Nobody of that name: NOT_FOUND once the call's deadline passed.
  try {
    seed.RpcSync("nobody", "echo", ferry::Payload(), 300ms);
    FAIL() << "a call to an unknown name succeeded";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_NOT_FOUND) << e.what();
    EXPECT_NE(std::string(e.what()).find("before the call's deadline"), std::string::npos)
        << e.what();
  }
  // A name that joins while the call waits: the call goes to it.
  ferry::Future f = seed.RpcAsync("late", "echo", ferry::Payload("hello"), 30000ms);
  Child late({"--name", "late", "--store", seed.store_address(), "--job", JobName()});
  EXPECT_EQ(late.Started().rfind("STARTED rank=-1 world=0", 0), 0u);
  EXPECT_EQ(f.Get().bytes(), "hello");
  late.Send("shutdown 2000");
  EXPECT_EQ(late.ShutdownLine().rfind("SHUTDOWN OK", 0), 0u);
  seed.Shutdown(ferry::ShutdownMode::kGraceful, 2000ms);
}

}  // namespace
