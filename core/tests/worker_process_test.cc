// The core across real processes: a worker killed with SIGKILL, frozen with
// SIGSTOP, or joining late, seen from a worker in the test process. The
// peers are ferry-test-worker processes (test_worker_main.cc).
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_workers.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One ferry-test-worker process, its stdin (closing it = graceful leave)
// and its stdout (lines awaited with a deadline).
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
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdout_);
  }
  // Waits for a stdout line starting with `prefix`; returns it ("" on timeout).
  std::string Expect(const std::string& prefix,
                     std::chrono::milliseconds limit = 15000ms) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      size_t nl;
      while ((nl = buf_.find('\n')) != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (line.rfind(prefix, 0) == 0) return line;
      }
      pollfd p{stdout_, POLLIN, 0};
      const int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now())
              .count());
      if (poll(&p, 1, ms < 0 ? 0 : ms) <= 0) break;
      char tmp[512];
      const ssize_t n = read(stdout_, tmp, sizeof tmp);
      if (n <= 0) break;
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return "";
  }
  void Signal(int sig) { kill(pid_, sig); }
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Closes stdin: the worker leaves gracefully and exits 0.
  int Leave() {
    close(stdin_);
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

std::string JobName() {
  return ferry_test::JobName("process_test");
}

using ferry_test::Eventually;

class WorkerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::make_unique<ferry::Worker>(
        ferry_test::WorkerOptions("seed", JobName(), "127.0.0.1:0", /*host_store=*/true));
  }
  std::unique_ptr<Child> Spawn(const std::string& name) {
    auto c = std::make_unique<Child>(name, seed_->store_address(), JobName());
    EXPECT_NE(c->Expect("READY"), "") << name << " did not start";
    return c;
  }
  std::unique_ptr<ferry::Worker> seed_;
};

// The documented bound: peer_timeout (1 s here) plus one heartbeat check.
constexpr auto kDeathBound = 5000ms;

TEST_F(WorkerProcessTest, KilledCalleeFailsThePendingCallWithPeerGone) {
  auto p = Spawn("callee");
  auto f = seed_->RpcAsync("callee", "hold", ferry::Payload(), 60000ms);
  ASSERT_NE(p->Expect("HELD"), "");
  const auto t0 = Clock::now();
  p->Kill();
  ASSERT_TRUE(f.Wait(kDeathBound)) << "a call to a killed worker must end";
  std::string why;
  EXPECT_EQ(f.status(&why), FERRY_PEER_GONE) << why;
  EXPECT_NE(why.find("callee"), std::string::npos) << why;
  EXPECT_LT(Clock::now() - t0, kDeathBound);
  // And it is seen as gone in the membership.
  EXPECT_TRUE(Eventually([&] {
    for (const auto& m : seed_->Members()) {
      if (m.name == "callee") return m.state == FERRY_MEMBER_GONE;
    }
    return false;
  }));
}

TEST_F(WorkerProcessTest, FrozenCalleeIsCaughtByHeartbeats) {
  auto p = Spawn("frozen");
  auto f = seed_->RpcAsync("frozen", "hold", ferry::Payload(), 60000ms);
  ASSERT_NE(p->Expect("HELD"), "");
  p->Signal(SIGSTOP);
  ASSERT_TRUE(f.Wait(kDeathBound)) << "a frozen worker must be declared gone";
  std::string why;
  EXPECT_EQ(f.status(&why), FERRY_PEER_GONE) << why;
  EXPECT_NE(why.find("heartbeat"), std::string::npos) << why;
}

TEST_F(WorkerProcessTest, ToHereOnAnRRefOwnedByAKilledWorkerFails) {
  auto p = Spawn("owner");
  ferry::RRef r = seed_->Remote("owner", "make", ferry::Payload("x"));
  EXPECT_EQ(r.ToHere().bytes(), "made:x");
  p->Kill();
  EXPECT_TRUE(Eventually([&] {
    try {
      r.ToHere(2000ms);
      return false;
    } catch (const ferry::Error& e) {
      return e.code() == FERRY_PEER_GONE;
    }
  }));
  r = ferry::RRef();  // releasing a dead owner's RRef sends nothing, hangs nowhere
  EXPECT_TRUE(Eventually([&] { return seed_->Stats().user_rrefs == 0; }));
}

TEST_F(WorkerProcessTest, ForksHeldByAKilledWorkerNoLongerCount) {
  auto p = Spawn("user");
  {
    ferry::RRef mine = seed_->CreateRRef(ferry::Payload("data"));
    ferry::Payload args;
    args.Ref(mine);
    seed_->RpcSync("user", "keep", std::move(args));
    ASSERT_NE(p->Expect("KEPT 1"), "");
  }
  EXPECT_EQ(seed_->Stats().owned_rrefs, 1u) << "the user's fork keeps the value";
  p->Kill();
  EXPECT_TRUE(Eventually([&] { return seed_->Stats().owned_rrefs == 0; }))
      << "the dead user's fork must stop counting";
}

TEST_F(WorkerProcessTest, UserToUserForkThenOwnerKilledMidFork) {
  auto owner = Spawn("owner");
  auto user = Spawn("user");
  ferry::RRef r = seed_->Remote("owner", "make", ferry::Payload("v"));
  // user <- seed (user -> user fork): the owner confirms, user accepts.
  {
    ferry::Payload args;
    args.Ref(r);
    seed_->RpcSync("user", "keep", std::move(args));
    ASSERT_NE(user->Expect("KEPT 1"), "");
  }
  EXPECT_TRUE(Eventually([&] { return seed_->Stats().pending_children == 0; }))
      << "the owner confirmed the child and the child accepted (G2)";
  auto stats = std::string(seed_->RpcSync("owner", "stats").bytes());
  EXPECT_EQ(stats.find("owned=1"), 0u) << stats;
  // Fork again, and kill the owner while that fork is being confirmed.
  ferry::Payload args;
  args.Ref(r);
  auto f = seed_->RpcAsync("user", "keep", std::move(args));
  owner->Kill();
  ASSERT_TRUE(f.Wait(10000ms));
  EXPECT_TRUE(Eventually([&] { return seed_->Stats().pending_children == 0; }))
      << "a fork the dead owner will never confirm must not pin its parent";
  r = ferry::RRef();
  EXPECT_TRUE(Eventually([&] {
    auto s = seed_->Stats();
    return s.user_rrefs == 0 && s.pending_controls == 0;
  }));
}

TEST_F(WorkerProcessTest, KilledCallerDoesNotHangTheCallee) {
  auto caller = Spawn("caller");
  seed_->Register("slow_owner", [](ferry::Call& c, ferry::Message) { c.Reply(); });
  // The caller holds a fork of our RRef; then dies.
  ferry::RRef mine = seed_->CreateRRef(ferry::Payload("v"));
  {
    ferry::Payload args;
    args.Ref(mine);
    seed_->RpcSync("caller", "keep", std::move(args));
  }
  caller->Kill();
  mine = ferry::RRef();
  EXPECT_TRUE(Eventually([&] { return seed_->Stats().owned_rrefs == 0; }));
}

TEST_F(WorkerProcessTest, AWorkerJoiningLateIsFoundAndOneLeavingIsSeenAsLeft) {
  auto f = seed_->RpcAsync("latecomer", "echo", ferry::Payload("hi"), 20000ms);
  auto p = Spawn("latecomer");
  ASSERT_TRUE(f.Wait(20000ms));
  std::string why;
  const auto s = f.status(&why);
  // The call may reach it before "echo" is registered (it registers after
  // joining); either way the worker was found.
  EXPECT_TRUE(s == FERRY_OK ||
              (s == FERRY_NOT_FOUND && why.find("no function") != std::string::npos))
      << why;
  EXPECT_EQ(seed_->RpcSync("latecomer", "echo", ferry::Payload("again")).bytes(),
            "again");
  EXPECT_EQ(p->Leave(), 0);
  EXPECT_TRUE(Eventually([&] {
    for (const auto& m : seed_->Members()) {
      if (m.name == "latecomer") return m.state == FERRY_MEMBER_LEFT;
    }
    return false;
  }));
}

}  // namespace
