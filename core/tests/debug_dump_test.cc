// The debug dump (docs/debugging.md) of deliberately hung jobs, from each
// entry point: the C/C++ API (ferry_worker_debug_dump), the signal
// (SIGUSR1 to a real worker process, FERRY_DEBUG_DIR), and the log of a
// wait that passes its timeout (a static job's shutdown barrier,
// wait_for_workers). Each dump must name the culprits.
#include <ferry/ferry.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_workers.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using nlohmann::json;

std::string JobName() {
  return ferry_test::JobName("debug_dump_test");
}

// A fresh directory for FERRY_DEBUG_DIR.
std::string TempDir() {
  std::string dir = "/tmp/ferry-dump-test.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  return dir;
}

// A worker process (ferry-test-worker or ferry-static-worker) with
// `extra_env` added to the test's environment; its stdout is read by
// Expect.
class Proc {
 public:
  Proc(const char* path, std::vector<std::string> args,
       const std::vector<std::string>& extra_env) {
    std::vector<std::string> env = ferry_test::ChildEnvironment(environ, extra_env);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    args.insert(args.begin(), path);
    pid_ = ferry_test::SpawnPiped(path, std::move(args), envp.data(), &stdin_, &stdout_);
  }
  ~Proc() {
    close(stdin_);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(stdout_);
  }
  std::string Expect(const std::string& prefix) {
    return ferry_test::ExpectLine(stdout_, &buf_, {prefix}, 20000ms);
  }
  void Send(const std::string& line) {
    const std::string l = line + "\n";
    ASSERT_EQ(write(stdin_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  std::string buf_;
};

// The dump file a worker named `name` of process `pid` writes in `dir` on
// the signal; parsed once it exists (null after 15 s).
json WaitForDumpFile(const std::string& dir, const std::string& name, pid_t pid) {
  const std::string path =
      dir + "/ferry-dump." + JobName() + "." + name + "." + std::to_string(pid) + ".json";
  json out;
  ferry_test::Eventually(
      [&] {
        std::ifstream in(path);
        if (!in) return false;
        out = json::parse(in, nullptr, /*allow_exceptions=*/false);
        return !out.is_discarded();
      },
      15000ms);
  return out;
}

// Whether one of the dump's "blocked_on" lines contains `words`.
bool BlockedOn(const json& dump, const std::string& words) {
  for (const auto& line : dump.value("blocked_on", json::array())) {
    if (line.get<std::string>().find(words) != std::string::npos) return true;
  }
  return false;
}

// Runs `fn` with this process's stderr (fd 2) going to a file; returns
// what was written there.
template <typename Fn>
std::string CaptureStderr(Fn fn) {
  char path[] = "/tmp/ferry-dump-stderr.XXXXXX";
  const int fd = mkstemp(path);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  return text.str();
}

// w0 (here) calls w1.call, whose handler calls w2.hold, which never
// answers; w1 and w2 are processes that write their signal dumps in dir_.
class HungChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::make_unique<ferry::Worker>(
        ferry_test::WorkerOptions("w0", JobName(), "127.0.0.1:0", /*host_store=*/true));
    dir_ = TempDir();
    w1_ = Spawn("w1");
    w2_ = Spawn("w2");
    ASSERT_NE(w1_->Expect("READY"), "");
    ASSERT_NE(w2_->Expect("READY"), "");
    call_ = std::make_unique<ferry::Future>(
        seed_->RpcAsync("w1", "call", ferry::Payload("w2 hold x"), 60000ms));
    ASSERT_NE(w2_->Expect("HELD"), "");
  }
  void TearDown() override {
    w2_.reset();  // the held call fails, and with it the chain
    if (call_) {
      EXPECT_TRUE(call_->Wait(10000ms));
    }
    std::system(("rm -rf " + dir_).c_str());
  }
  std::unique_ptr<Proc> Spawn(const std::string& name) {
    return std::make_unique<Proc>(
        FERRY_TEST_WORKER,
        std::vector<std::string>{"--name", name, "--store", seed_->store_address(),
                                 "--job", JobName(), "--secret", "test-secret"},
        std::vector<std::string>{"FERRY_DEBUG_DIR=" + dir_});
  }
  // Runs `ferry debug dump` with `env` ("VAR=value ...") and `args`; its
  // exit status in *status, its stdout and stderr returned.
  std::string RunTool(const std::string& env, const std::string& args, int* status) {
    const std::string cmd = "env -u FERRY_SECRET -u FERRY_SECRET_FILE " + env + " " +
                            FERRY_DEBUG_DUMP_TOOL + " --store " + seed_->store_address() +
                            " --job " + JobName() + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
  }

  std::unique_ptr<ferry::Worker> seed_;
  std::string dir_;
  std::unique_ptr<Proc> w1_, w2_;
  std::unique_ptr<ferry::Future> call_;
};

// Every worker's dump names its part of the chain: w0's through the API,
// w1's and w2's on SIGUSR1.
TEST_F(HungChainTest, NamedByTheApiAndTheSignal) {
  const json mine = json::parse(seed_->DebugDump());
  EXPECT_EQ(mine["worker"]["name"], "w0");
  ASSERT_EQ(mine["outgoing_calls"].size(), 1u) << mine.dump(2);
  EXPECT_EQ(mine["outgoing_calls"][0]["to"], "w1");
  EXPECT_EQ(mine["outgoing_calls"][0]["function"], "call");
  EXPECT_GT(mine["outgoing_calls"][0]["deadline_in_ms"].get<int64_t>(), 50000);
  EXPECT_TRUE(BlockedOn(mine, "a call to w1.call waits for its reply")) << mine.dump(2);
  bool w1_connected = false;
  for (const auto& p : mine["engine"]["peers"]) {
    if (p["name"] == "w1") {
      w1_connected = p["state"] == "connected" && p["transport"] == "tcp" &&
                     p.contains("last_heard_ms_ago");
    }
  }
  EXPECT_TRUE(w1_connected) << mine["engine"].dump(2);

#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer runs an asynchronous signal's handler only when the
  // thread that received it next enters an intercepted call; a worker's
  // main thread blocked in read() never does, so the signal is not tested
  // here (the dump it makes is the API's, tested above and through the CLI).
  GTEST_SKIP() << "the signal's handler is deferred indefinitely under TSan";
#endif
  // The signal, in w1's process: its handler waits on its call to w2.
  kill(w1_->pid(), SIGUSR1);
  const json d1 = WaitForDumpFile(dir_, "w1", w1_->pid());
  ASSERT_TRUE(d1.is_object()) << "no dump file from w1 in " << dir_;
  EXPECT_TRUE(BlockedOn(d1,
                        "handler 'call' (called by 'w0') waits on its call to "
                        "w2.hold for its reply"))
      << d1.dump(2);
  ASSERT_EQ(d1["outgoing_calls"].size(), 1u) << d1.dump(2);
  EXPECT_EQ(d1["outgoing_calls"][0]["made_by"]["caller"], "w0");
  EXPECT_EQ(d1["outgoing_calls"][0]["made_by"]["function"], "call");
  ASSERT_EQ(d1["incoming_calls"]["calls"].size(), 1u) << d1.dump(2);
  EXPECT_EQ(d1["incoming_calls"]["calls"][0]["state"], "running");
  EXPECT_EQ(d1["incoming_calls"]["calls"][0]["caller"], "w0");

  // And in w2's: the call of hold from w1 is not answered ("running" if
  // the signal came before the handler, which printed HELD, returned).
  kill(w2_->pid(), SIGUSR1);
  const json d2 = WaitForDumpFile(dir_, "w2", w2_->pid());
  ASSERT_TRUE(d2.is_object()) << "no dump file from w2 in " << dir_;
  EXPECT_TRUE(BlockedOn(d2, "a call of 'hold' (called by 'w1') is not answered") ||
              BlockedOn(d2, "handler 'hold' (called by 'w1') is running"))
      << d2.dump(2);
  EXPECT_TRUE(d2["outgoing_calls"].empty());

  // The processes survived the signal and still serve.
  EXPECT_EQ(seed_->RpcSync("w2", "echo", ferry::Payload("alive")).bytes(), "alive");
}

// `ferry debug dump` from another process, through the job's store, with
// the job's secret and only with it.
TEST_F(HungChainTest, NamedByTheCliThroughTheStoreWithTheSecret) {
  int status = -1;
  std::string out = RunTool("FERRY_SECRET=test-secret", "--worker w1", &status);
  ASSERT_EQ(status, 0) << out;
  const json d1 = json::parse(out);
  EXPECT_EQ(d1["worker"]["name"], "w1");
  EXPECT_TRUE(BlockedOn(d1,
                        "handler 'call' (called by 'w0') waits on its call to "
                        "w2.hold for its reply"))
      << d1.dump(2);

  out = RunTool("FERRY_SECRET=test-secret", "--all", &status);
  ASSERT_EQ(status, 0) << out;
  const json all = json::parse(out);
  EXPECT_TRUE(BlockedOn(all["w0"], "a call to w1.call waits for its reply")) << out;
  EXPECT_TRUE(BlockedOn(all["w2"], "'hold' (called by 'w1')")) << out;

  out = RunTool("FERRY_SECRET=test-secret", "--worker nobody", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("NOT_FOUND: no live worker named 'nobody'"), std::string::npos)
      << out;

  // No secret: refused before anything is sent. A wrong one: the handshake
  // refuses it, and no dump comes back.
  out = RunTool("", "--worker w1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("PERMISSION_DENIED: no job secret"), std::string::npos) << out;
  out = RunTool("FERRY_SECRET=wrong", "--worker w1", &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(out.find("blocked_on"), std::string::npos) << out;
  EXPECT_NE(out.find("secret"), std::string::npos) << out;
}

// The C API's buffer contract: a short buffer gets RESOURCE_EXHAUSTED and
// the length needed; then the text, NUL-terminated.
TEST(DebugDumpTest, ShortBufferGetsTheLengthNeeded) {
  ferry::Worker w(
      ferry_test::WorkerOptions("solo", JobName(), "127.0.0.1:0", /*host_store=*/true));
  uint64_t len = 0;
  EXPECT_EQ(ferry_worker_debug_dump(w.get(), nullptr, 0, &len), FERRY_RESOURCE_EXHAUSTED);
  EXPECT_NE(std::string(ferry_last_error()).find("cap >= len + 1"), std::string::npos);
  ASSERT_GT(len, 10u);
  std::string buf(len + 1, 'x');
  uint64_t len2 = 0;
  ASSERT_EQ(ferry_worker_debug_dump(w.get(), buf.data(), buf.size(), &len2), FERRY_OK);
  ASSERT_EQ(len2, len);
  EXPECT_EQ(buf[len], '\0');
  EXPECT_EQ(json::parse(buf.c_str())["worker"]["name"], "solo");
  EXPECT_EQ(ferry_worker_debug_dump(nullptr, nullptr, 0, &len), FERRY_INVALID_ARGUMENT);
  // And after the worker left.
  w.Shutdown();
  EXPECT_EQ(json::parse(w.DebugDump())["worker"]["state"], "left");
}

// The signal in this process (sent to this thread, where ThreadSanitizer
// runs its handler too): every live worker of the process is dumped, to
// stderr and to a file each under FERRY_DEBUG_DIR, and the process lives on.
TEST(DebugDumpTest, SignalDumpsEveryWorkerOfTheProcess) {
  ferry::Worker a(
      ferry_test::WorkerOptions("a", JobName(), "127.0.0.1:0", /*host_store=*/true));
  ferry::Worker b(ferry_test::WorkerOptions("b", JobName(), a.store_address()));
  const std::string dir = TempDir();
  setenv("FERRY_DEBUG_DIR", dir.c_str(), 1);
  std::string log;
  json da, db;
  log = CaptureStderr([&] {
    pthread_kill(pthread_self(), SIGUSR1);
    da = WaitForDumpFile(dir, "a", getpid());
    db = WaitForDumpFile(dir, "b", getpid());
  });
  unsetenv("FERRY_DEBUG_DIR");
  ASSERT_TRUE(da.is_object() && db.is_object()) << log;
  EXPECT_EQ(da["worker"]["name"], "a");
  EXPECT_EQ(db["worker"]["name"], "b");
  EXPECT_EQ(da["worker"]["pid"], getpid());
  EXPECT_NE(log.find("--- ferry debug dump of worker 'b'"), std::string::npos) << log;
  std::system(("rm -rf " + dir).c_str());
}

// A static job of two: rank 0 (here) shuts down, rank 1 (a process) never
// does. While rank 0 waits the API names rank 1; when the barrier's
// timeout passes the same dump goes to the log.
TEST(DebugDumpTest, ShutdownBarrierNamesTheRankItWaitsFor) {
  const std::string store = "127.0.0.1:" + std::to_string(ferry_test::FreePort());
  ferry::Worker::Options o =
      ferry_test::WorkerOptions("worker0", JobName(), store, /*host_store=*/true);
  o.world_size = 2;
  o.rank = 0;
  o.start_timeout = 30000ms;
  auto start = std::async(std::launch::async, [o] { return ferry::Worker(o); });
  Proc rank1(FERRY_STATIC_WORKER,
             {"--name", "worker1", "--store", store, "--job", JobName(), "--world-size",
              "2", "--rank", "1"},
             {});
  ferry::Worker w0 = start.get();
  ASSERT_EQ(rank1.Expect("STARTED").rfind("STARTED rank=1", 0), 0u);

  json during;
  std::string error;
  const std::string log = CaptureStderr([&] {
    auto shutdown = std::async(std::launch::async, [&] {
      try {
        w0.Shutdown(ferry::ShutdownMode::kGraceful, 3000ms);
      } catch (const ferry::Error& e) {
        error = e.what();
      }
    });
    ferry_test::Eventually(
        [&] {
          during = json::parse(w0.DebugDump());
          return BlockedOn(during, "the shutdown barrier waits for");
        },
        10000ms);
    shutdown.get();
  });
  EXPECT_TRUE(BlockedOn(during, "the shutdown barrier waits for 'worker1' (rank 1)"))
      << during.dump(2);
  EXPECT_EQ(during["static_job"]["this_worker_arrived"], true);
  EXPECT_EQ(during["static_job"]["not_arrived_at_shutdown"].size(), 1u);
  EXPECT_NE(error.find("'worker1' (rank 1) did not reach shutdown"), std::string::npos)
      << error;
  EXPECT_NE(log.find("--- ferry debug dump of worker 'worker0'"), std::string::npos)
      << log;
  EXPECT_NE(log.find("the shutdown barrier waits for 'worker1' (rank 1)"),
            std::string::npos)
      << log;
}

// wait_for_workers that passes its timeout logs the dump too.
TEST(DebugDumpTest, WaitForWorkersTimeoutLogsTheDump) {
  ferry::Worker w(
      ferry_test::WorkerOptions("alone", JobName(), "127.0.0.1:0", /*host_store=*/true));
  bool failed = false;
  const std::string log = CaptureStderr([&] {
    try {
      w.WaitForWorkers(3, 300ms);
    } catch (const ferry::Error& e) {
      failed = e.code() == FERRY_DEADLINE_EXCEEDED;
    }
  });
  EXPECT_TRUE(failed);
  EXPECT_NE(log.find("wait_for_workers waits for 3 live workers (1 now)"),
            std::string::npos)
      << log;
}

}  // namespace
