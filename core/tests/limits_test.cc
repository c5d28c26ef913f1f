// The worker's resource limits (docs/limits.md) the way a user meets them:
// a peer process that floods calls, raw sockets that lie about a length,
// connect and never speak, or come by the hundred, and the errors and waits
// a caller sees at each limit. Memory is measured where the limit exists to
// bound it (VmHWM of this process, the callee), file descriptors where
// connections are refused (/proc/self/fd).
#include "test_workers.h"
#include "wire.h"  // the ferry-tcp wire, spoken from raw sockets

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <condition_variable>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>

extern char** environ;

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer keeps freed memory in a quarantine (256 MiB by default)
// before reusing it, so a flood that is refused still grows the resident
// set by everything it allocated and freed. A small quarantine keeps the
// memory bounds below meaningful under ASan (ASAN_OPTIONS still wins).
extern "C" const char* __asan_default_options() {
  return "quarantine_size_mb=4";
}
#endif

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ferry::Worker;
using ferry_test::Eventually;

// ---- what the tests measure -----------------------------------------------------

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM").
long StatusKiB(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux: "5" to clear_refs), so that a
// later VmHWM is the peak of what happened in between.
void ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory stream itself
}

// ---- workers ------------------------------------------------------------------

Worker::Options Opts(const std::string& name, const std::string& store,
                     bool host = false) {
  return ferry_test::WorkerOptions(name, ferry_test::JobName("limits_test"), store, host,
                                   "tcp", 1000ms, 10000ms);
}

// A flood keeps both processes busy: on a loaded machine a 1 s peer
// timeout could declare the flooder gone mid-flood (not what is tested).
constexpr auto kFloodPeerTimeout = 10000ms;
const std::vector<std::string> kFloodPeerTimeoutArgs = {"--peer-timeout-ms", "10000"};

void RegisterEcho(Worker& w) {
  w.Register("echo", [](ferry::Call& call, ferry::Message args) {
    call.Reply(ferry::Payload(std::string(args.bytes())));
  });
}

// The tcp address the worker listens on for its peers (from its debug dump).
std::string TcpAddress(Worker& w) {
  const auto dump = nlohmann::json::parse(w.DebugDump());
  std::string found;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
    if (j.is_object()) {
      if (j.value("name", "") == "tcp" && j.contains("address") && found.empty()) {
        found = j["address"].get<std::string>();
      }
      for (const auto& [k, v] : j.items()) walk(v);
    } else if (j.is_array()) {
      for (const auto& v : j) walk(v);
    }
  };
  walk(dump);
  return found;
}

// A blocking TCP connection to "host:port"; -1 on failure.
int RawConnect(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr) != 1) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
         static_cast<ssize_t>(bytes.size());
}

// Reads (and drops) what `fd` receives until the worker closes it: true
// then, false if it is still open at `limit`.
bool AwaitClosedByPeer(int fd, std::chrono::milliseconds limit = 10000ms) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

// A ferry-tcp hello announcing generous receive limits.
std::string TcpHello() {
  ferry_tcp::wire::Hello h;
  h.max_header = 64 * 1024;
  h.max_segments = 64;
  h.inline_limit = 16 * 1024;
  h.inline_total = 256 * 1024;
  h.max_message = uint64_t{1} << 40;
  std::string out(ferry_tcp::wire::kHelloSize, '\0');
  ferry_tcp::wire::EncodeHello(h, out.data());
  return out;
}

// A frame prefix and segment table announcing one segment of `length`
// bytes (not inline) after a `header_len`-byte header, and that header.
std::string FrameClaiming(uint64_t length, uint32_t header_len = 16) {
  ferry_tcp::wire::Prefix p;
  p.header_len = header_len;
  p.num_segments = 1;
  p.payload_bytes = length;
  std::string out(
      ferry_tcp::wire::kPrefixSize + ferry_tcp::wire::kSegmentEntrySize + header_len,
      '\0');
  ferry_tcp::wire::EncodePrefix(p, out.data());
  char* seg = out.data() + ferry_tcp::wire::kPrefixSize;
  ferry_tcp::wire::Put64(seg, length);
  ferry_tcp::wire::Put32(seg + 8, 1);  // kDLCPU
  return out;
}

// ---- a peer process ---------------------------------------------------------

// One ferry-limits-peer process (limits_peer_main.cc): commands on its
// stdin, lines awaited on its stdout.
class PeerProcess {
 public:
  PeerProcess(const std::string& name, const std::string& store,
              const std::vector<std::string>& extra) {
    std::vector<std::string> args = {FERRY_LIMITS_PEER,
                                     "--name",
                                     name,
                                     "--store",
                                     store,
                                     "--job",
                                     ferry_test::JobName("limits_test"),
                                     "--secret",
                                     "test-secret"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ferry_test::SpawnPiped(FERRY_LIMITS_PEER, args, environ, &stdin_, &stdout_);
  }
  ~PeerProcess() {
    if (stdin_ >= 0) close(stdin_);
    int status = 0;
    // It leaves when its stdin closes; a stuck one is killed.
    for (int i = 0; i < 200 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      pollfd p{stdout_, POLLIN, 0};
      poll(&p, 1, 50);
      char tmp[512];
      (void)!read(stdout_, tmp, sizeof tmp);
    }
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    close(stdout_);
  }
  void Send(const std::string& line) {
    const std::string l = line + "\n";
    ASSERT_EQ(write(stdin_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  void Signal(int sig) { kill(pid_, sig); }
  std::string Expect(const std::string& prefix,
                     std::chrono::milliseconds limit = 60000ms) {
    return ferry_test::ExpectLine(stdout_, &buf_, {prefix}, limit);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  std::string buf_;
};

// "ok=3 exhausted=5 ..." -> the number after `key=`.
long Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(key + "=");
  return at == std::string::npos ? -1 : std::stol(line.substr(at + key.size() + 1));
}

// A gate that blocking handlers wait at until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
};

constexpr long kMiB = 1024;  // in KiB, as /proc reports

// ---- flood ---------------------------------------------------------------------

// A peer process floods a worker whose handlers are all busy: beyond
// max_queued_calls each call is refused with RESOURCE_EXHAUSTED naming the
// limit (none is dropped silently, none hangs), and the callee's memory stays
// far below what holding the flood would take.
TEST(Limits, AFloodBeyondTheCallQueueIsRefusedByNameAndMemoryStaysBounded) {
  auto o = Opts("callee", "127.0.0.1:0", true);
  o.peer_timeout = kFloodPeerTimeout;
  o.limits.max_queued_calls = 64;
  Worker callee(o);
  auto gate = std::make_shared<Gate>();
  callee.Register(
      "slow",
      [gate](ferry::Call& call, ferry::Message) {
        gate->Wait();
        call.Reply();
      },
      FERRY_HANDLER_MAY_BLOCK);
  // Whatever fails below, the handlers are let go before the worker.
  struct OpenAtExit {
    Gate* g;
    ~OpenAtExit() { g->Open(); }
  } open_at_exit{gate.get()};

  // 8000 calls of 16 KiB: 125 MiB if the callee kept them all.
  constexpr int kCalls = 8000;
  constexpr long kBytes = 16 * 1024;
  std::vector<std::string> args = kFloodPeerTimeoutArgs;
  args.insert(args.end(), {"--max-calls-in-flight", "100000"});
  PeerProcess flooder("flooder", callee.store_address(), args);
  ASSERT_EQ(flooder.Expect("READY"), "READY");
  const long rss_before = StatusKiB("VmRSS");
  ResetPeakRss();
  flooder.Send("flood callee slow " + std::to_string(kCalls) + " " +
               std::to_string(kBytes) + " 60000");
  // (Refusals may come back before the last call is made: "SENT" may
  // follow this line, and is not awaited.)
  ASSERT_EQ(flooder.Expect("HALF_REFUSED"), "HALF_REFUSED");
  const long peak = StatusKiB("VmHWM");
  gate->Open();
  const std::string result = flooder.Expect("RESULT");
  ASSERT_NE(result, "") << "the flooder's calls did not all end";
  // "EXHAUSTED <first refusal>", then "OTHER <first other error>" if any.
  const std::string exhausted = flooder.Expect("EXHAUSTED", 5000ms);
  const std::string other =
      Field(result, "other") > 0 ? flooder.Expect("OTHER", 5000ms) : std::string();

  EXPECT_EQ(Field(result, "ok") + Field(result, "exhausted"), kCalls) << result;
  EXPECT_GE(Field(result, "exhausted"), kCalls / 2) << result;
  EXPECT_GE(Field(result, "ok"), 64)
      << "the queued calls ran once the handlers were free";
  EXPECT_EQ(Field(result, "deadline"), 0) << result;
  EXPECT_EQ(Field(result, "other"), 0) << result << "\n" << other;
  EXPECT_NE(exhausted.find("max_queued_calls (64"), std::string::npos) << exhausted;
  EXPECT_NE(exhausted.find("FERRY_MAX_QUEUED_CALLS"), std::string::npos) << exhausted;
  EXPECT_NE(exhausted.find("refused the call of 'slow'"), std::string::npos) << exhausted;

  const auto dump = nlohmann::json::parse(callee.DebugDump());
  EXPECT_EQ(dump["limits"]["calls_refused_here"].get<long>(), Field(result, "exhausted"));
  EXPECT_EQ(dump["limits"]["max_queued_calls"].get<long>(), 64);
  const long grew = peak - rss_before;
  std::printf(
      "[ limits ] flood of %d x %ld B refused beyond 64 queued calls: callee "
      "VmRSS %ld KiB before, VmHWM %ld KiB during (+%ld KiB)\n",
      kCalls, kBytes, rss_before, peak, grew);
  RecordProperty("callee_peak_growth_kib", std::to_string(grew));
  // Holding the flood would take > 125 MiB; the queue holds 68 calls (~1 MiB).
  EXPECT_LT(grew, 40 * kMiB);
}

// The same flood from a peer whose own limit max_calls_in_flight_per_peer
// is small: its calls wait for room (back-pressure) and every one succeeds;
// the callee never holds more than that many.
TEST(Limits, AFloodFromAPeerWithFewCallsInFlightIsBackPressuredAndAllSucceed) {
  auto o = Opts("callee", "127.0.0.1:0", true);
  o.peer_timeout = kFloodPeerTimeout;
  Worker callee(o);
  std::atomic<int> running{0}, most{0};
  callee.Register(
      "count",
      [&](ferry::Call& call, ferry::Message) {
        const int now = running.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        running.fetch_sub(1);
        call.Reply();
      },
      FERRY_HANDLER_MAY_BLOCK);
  constexpr int kCalls = 4000;
  std::vector<std::string> args = kFloodPeerTimeoutArgs;
  args.insert(args.end(), {"--max-calls-in-flight", "16"});
  PeerProcess flooder("flooder", callee.store_address(), args);
  ASSERT_EQ(flooder.Expect("READY"), "READY");
  const long rss_before = StatusKiB("VmRSS");
  ResetPeakRss();
  flooder.Send("flood callee count " + std::to_string(kCalls) + " 16384 60000");
  ASSERT_NE(flooder.Expect("SENT"), "");
  const std::string result = flooder.Expect("RESULT");
  const long peak = StatusKiB("VmHWM");
  EXPECT_EQ(Field(result, "ok"), kCalls)
      << result << " " << flooder.Expect("OTHER", 1000ms);
  EXPECT_LE(most.load(), 16)
      << "the callee ran more calls at once than the caller allows";
  std::printf(
      "[ limits ] flood of %d x 16384 B at 16 calls in flight: callee VmRSS %ld "
      "KiB before, VmHWM %ld KiB during (+%ld KiB)\n",
      kCalls, rss_before, peak, peak - rss_before);
  EXPECT_LT(peak - rss_before, 40 * kMiB);
}

// A peer that stops reading (a frozen process): the bytes to it pile up
// until max_queued_bytes_per_connection, and then a new call waits for
// them to drain, failing at its deadline with the limit named.
TEST(Limits, CallsToAPeerThatStopsReadingWaitForTheQueuedBytesToDrain) {
  // A peer timeout longer than the test: the frozen peer stays a peer.
  auto o = ferry_test::WorkerOptions("caller", ferry_test::JobName("limits_test"),
                                     "127.0.0.1:0", true, "tcp", 30000ms, 10000ms);
  o.limits.max_queued_bytes_per_connection = 1 << 20;
  Worker caller(o);
  PeerProcess frozen("frozen", caller.store_address(), {});
  ASSERT_EQ(frozen.Expect("READY"), "READY");
  caller.RpcSync("frozen", "sink");  // the connection is up
  frozen.Signal(SIGSTOP);
  struct Thaw {
    PeerProcess* p;
    ~Thaw() { p->Signal(SIGCONT); }
  } thaw{&frozen};
  // 1 MiB calls until one finds 1 MiB queued: the socket buffers take a
  // few hundred KiB, so the third call at the latest must wait.
  std::vector<std::unique_ptr<ferry::Future>> calls;
  std::string why;
  for (int i = 0; i < 16 && why.empty(); ++i) {
    calls.push_back(std::make_unique<ferry::Future>(caller.RpcAsync(
        "frozen", "sink", ferry::Payload(std::string(1 << 20, 'q')), 300ms)));
    if (calls.back()->done() && calls.back()->status(&why) != FERRY_DEADLINE_EXCEEDED) {
      why.clear();
    }
  }
  EXPECT_LE(calls.size(), 4u);
  EXPECT_NE(why.find("bytes to worker 'frozen' were queued and not yet sent"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("max_queued_bytes_per_connection (1048576"), std::string::npos)
      << why;
  EXPECT_NE(why.find("FERRY_MAX_QUEUED_BYTES_PER_CONNECTION"), std::string::npos) << why;
}

// ---- back-pressure with a deadline --------------------------------------------

class LimitsPair : public ::testing::Test {
 protected:
  // A callee that holds every call of "hold" until the test answers it,
  // and answers "echo" at once; a caller with `limits`.
  void Start(const ferry_limits_t& caller_limits,
             const ferry_limits_t& callee_limits = {}) {
    auto o = Opts("callee", "127.0.0.1:0", true);
    o.limits = callee_limits;
    callee_ = std::make_unique<Worker>(o);
    RegisterEcho(*callee_);
    callee_->Register("hold", [this](ferry::Call& call, ferry::Message) {
      std::lock_guard<std::mutex> l(mu_);
      held_.push_back(std::make_unique<ferry::Call>(std::move(call)));
    });
    auto c = Opts("caller", callee_->store_address());
    c.limits = caller_limits;
    caller_ = std::make_unique<Worker>(c);
    caller_->WaitForWorkers(2, 10000ms);
  }
  size_t Held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_.size();
  }
  void AnswerOne() {
    std::unique_ptr<ferry::Call> c;
    {
      std::lock_guard<std::mutex> l(mu_);
      c = std::move(held_.front());
      held_.erase(held_.begin());
    }
    c->Reply();
  }
  void TearDown() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      held_.clear();  // answered INTERNAL: nobody waits for them
    }
    caller_.reset();
    callee_.reset();
  }
  std::unique_ptr<Worker> callee_, caller_;
  std::mutex mu_;
  std::vector<std::unique_ptr<ferry::Call>> held_;
};

TEST_F(LimitsPair, ACallBeyondTheCallsInFlightWaitsForRoomWithinItsDeadline) {
  ferry_limits_t l{};
  l.max_calls_in_flight_per_peer = 2;
  Start(l);
  ferry::Future a = caller_->RpcAsync("callee", "hold");
  ferry::Future b = caller_->RpcAsync("callee", "hold");
  ASSERT_TRUE(Eventually([&] { return Held() == 2; }));

  // No room: the third call waits in rpc_async for its whole deadline.
  const auto began = Clock::now();
  ferry::Future c = caller_->RpcAsync("callee", "hold", ferry::Payload(), 300ms);
  const auto waited = Clock::now() - began;
  EXPECT_GE(waited, 250ms) << "it did not wait for room";
  ASSERT_TRUE(c.Wait(5000ms));
  std::string why;
  EXPECT_EQ(c.status(&why), FERRY_DEADLINE_EXCEEDED);
  EXPECT_NE(why.find("waited"), std::string::npos) << why;
  EXPECT_NE(why.find("2 calls to worker 'callee' were in flight"), std::string::npos)
      << why;
  EXPECT_NE(why.find("max_calls_in_flight_per_peer (2"), std::string::npos) << why;
  EXPECT_NE(why.find("FERRY_MAX_CALLS_IN_FLIGHT_PER_PEER"), std::string::npos) << why;
  EXPECT_EQ(Held(), 2u) << "the call that found no room was never sent";

  // A call that waits is sent as soon as one in flight is answered.
  std::atomic<bool> sent{false};
  std::unique_ptr<ferry::Future> d;
  std::thread t([&] {
    d = std::make_unique<ferry::Future>(
        caller_->RpcAsync("callee", "echo", ferry::Payload("d"), 20000ms));
    sent = true;
  });
  // The debug dump names the wait (and so shows the call is held there).
  ASSERT_TRUE(Eventually([&] {
    return caller_->DebugDump().find(
               "1 call(s) to 'callee' wait in rpc_async for room: 2 "
               "in flight") != std::string::npos;
  })) << caller_->DebugDump();
  EXPECT_FALSE(sent.load());
  AnswerOne();
  ASSERT_TRUE(Eventually([&] { return sent.load(); }));
  t.join();
  EXPECT_EQ(d->Get().bytes(), "d");
  EXPECT_EQ(a.Get().bytes(), "");
  AnswerOne();
  b.Get();
}

TEST_F(LimitsPair, AMessageOverTheSizeLimitFailsBeforeAnythingIsSent) {
  ferry_limits_t l{};
  l.max_message_size = 1 << 20;
  Start(l, l);
  std::atomic<int> served{0};
  callee_->Register("count", [&](ferry::Call& call, ferry::Message) {
    served.fetch_add(1);
    call.Reply();
  });
  try {
    caller_->RpcSync("callee", "count", ferry::Payload(std::string(2 << 20, 'x')));
    FAIL() << "a 2 MiB call went through a 1 MiB limit";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_RESOURCE_EXHAUSTED);
    const std::string why = e.what();
    EXPECT_NE(why.find("max_message_size (1048576"), std::string::npos) << why;
    EXPECT_NE(why.find("FERRY_MAX_MESSAGE_SIZE"), std::string::npos) << why;
    EXPECT_NE(why.find("nothing was sent"), std::string::npos) << why;
  }
  caller_->RpcSync("callee", "count", ferry::Payload(std::string(512 << 10, 'x')));
  EXPECT_EQ(served.load(), 1) << "only the call within the limit reached the callee";

  // A result over the limit: the caller hears why at once, not at its deadline.
  callee_->Register("grow", [](ferry::Call& call, ferry::Message) {
    call.Reply(ferry::Payload(std::string(2 << 20, 'y')));
  });
  const auto began = Clock::now();
  try {
    caller_->RpcSync("callee", "grow", ferry::Payload(), 20000ms);
    FAIL() << "a 2 MiB result went through a 1 MiB limit";
  } catch (const ferry::Error& e) {
    EXPECT_EQ(e.code(), FERRY_RESOURCE_EXHAUSTED) << e.what();
    EXPECT_NE(std::string(e.what()).find("result could not be sent"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - began, 10000ms);
}

// A peer whose own limit is larger sends a message over this worker's: the
// receiver closes that connection (the sender hears of it) and allocates
// nothing for it; its other peers go on.
TEST_F(LimitsPair, AMessageOverTheReceiversLimitClosesThatConnectionOnly) {
  ferry_limits_t small{}, large{};
  small.max_message_size = 1 << 20;
  large.max_message_size = 64 << 20;
  Start(large, small);
  Worker other(Opts("other", callee_->store_address()));
  EXPECT_EQ(other.RpcSync("callee", "echo", ferry::Payload("before")).bytes(), "before");
  try {
    caller_->RpcSync("callee", "echo", ferry::Payload(std::string(4 << 20, 'x')),
                     20000ms);
    FAIL() << "a 4 MiB message went through the receiver's 1 MiB limit";
  } catch (const ferry::Error& e) {
    EXPECT_NE(e.code(), FERRY_OK);
  }
  EXPECT_EQ(other.RpcSync("callee", "echo", ferry::Payload("after")).bytes(), "after");
}

// ---- raw sockets ---------------------------------------------------------------

class LimitsRaw : public ::testing::Test {
 protected:
  void Start(const ferry_limits_t& limits) {
    auto o = Opts("server", "127.0.0.1:0", true);
    o.limits = limits;
    server_ = std::make_unique<Worker>(o);
    RegisterEcho(*server_);
    client_ = std::make_unique<Worker>(Opts("client", server_->store_address()));
    address_ = TcpAddress(*server_);
    ASSERT_FALSE(address_.empty()) << server_->DebugDump();
    Echo("first");
  }
  void Echo(const std::string& s) {
    EXPECT_EQ(client_->RpcSync("server", "echo", ferry::Payload(s)).bytes(), s);
  }
  std::unique_ptr<Worker> server_, client_;
  std::string address_;
};

// Headers that claim more than anyone could hold: the worker closes each
// such connection, allocates nothing of the claim, and serves its real peer.
TEST_F(LimitsRaw, AHeaderClaimingAHugeLengthClosesThatConnectionAndNothingElse) {
  ferry_limits_t l{};
  l.max_message_size = 64 << 20;
  Start(l);
  const long rss_before = StatusKiB("VmRSS");
  ResetPeakRss();
  const uint64_t kHuge = uint64_t{1} << 62;
  struct Case {
    const char* what;
    std::string bytes;
  };
  const Case cases[] = {
      // No hello at all: a frame prefix claiming 2^62 bytes.
      {"a frame without a hello", FrameClaiming(kHuge)},
      // The tcp transport's own limit refuses this one...
      {"2^62 bytes after a hello", TcpHello() + FrameClaiming(kHuge)},
      // ...and the core's max_message_size this one (under the transport's).
      {"3 GiB after a hello", TcpHello() + FrameClaiming(uint64_t{3} << 30)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int fd = RawConnect(address_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, c.bytes));
    EXPECT_TRUE(AwaitClosedByPeer(fd)) << "the worker kept the connection open";
    close(fd);
    Echo(c.what);
  }
  const long peak = StatusKiB("VmHWM");
  std::printf(
      "[ limits ] headers claiming 2^62 and 3 GiB: VmRSS %ld KiB before, VmHWM "
      "%ld KiB after (+%ld KiB)\n",
      rss_before, peak, peak - rss_before);
  EXPECT_LT(peak - rss_before, 16 * kMiB);
}

// Connected and silent, or a transport hello and then silence: closed
// after the handshake timeout, the real peer undisturbed.
TEST_F(LimitsRaw, AConnectionThatNeverSpeaksIsClosedAfterTheHandshakeTimeout) {
  ferry_limits_t l{};
  l.handshake_timeout_ms = 300;
  Start(l);
  const auto began = Clock::now();
  const int silent = RawConnect(address_);
  const int hello_only = RawConnect(address_);
  ASSERT_GE(silent, 0);
  ASSERT_GE(hello_only, 0);
  ASSERT_TRUE(SendAll(hello_only, TcpHello()));
  EXPECT_TRUE(AwaitClosedByPeer(silent));
  EXPECT_TRUE(AwaitClosedByPeer(hello_only));
  EXPECT_GE(Clock::now() - began, 250ms) << "closed before its handshake timeout";
  close(silent);
  close(hello_only);
  Echo("still served");
}

// Hundreds of connections at once beyond max_connections: the excess is
// closed as it comes, the real peer's calls go through during the storm,
// and once the sockets go, so do the worker's descriptors.
TEST_F(LimitsRaw, ManyConnectionsAtOnceBeyondTheLimitAreRefusedAndNothingLeaks) {
  ferry_limits_t l{};
  l.max_connections = 32;
  l.handshake_timeout_ms = 5000;
  Start(l);
  const int fds_before = OpenFds();
  constexpr int kSockets = 600;
  std::vector<int> socks;
  for (int i = 0; i < kSockets; ++i) {
    const int fd = RawConnect(address_);
    ASSERT_GE(fd, 0) << "connect " << i << ": " << strerror(errno);
    socks.push_back(fd);
  }
  Echo("during the storm");
  // The worker holds at most 32 connections (its store's and its peer's
  // among them): at least kSockets - 32 are closed from its side, promptly
  // (before the 5 s handshake timeout would close the rest).
  int closed = 0;
  std::vector<bool> done(socks.size(), false);
  const bool refused = Eventually(
      [&] {
        for (size_t i = 0; i < socks.size(); ++i) {
          if (done[i]) continue;
          char buf[256];
          const ssize_t n = recv(socks[i], buf, sizeof buf, MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN)) {
            done[i] = true;
            ++closed;
          }
        }
        return closed >= kSockets - 32;
      },
      4000ms);
  EXPECT_TRUE(refused) << closed << " of " << kSockets << " closed";
  const auto dump = nlohmann::json::parse(server_->DebugDump());
  EXPECT_GE(dump["engine"]["connections_refused_at_limit"].get<int>(), kSockets - 32);
  Echo("after the storm");
  for (int fd : socks) close(fd);
  // Nothing leaks: the worker's descriptors for them are gone too.
  EXPECT_TRUE(Eventually([&] { return OpenFds() <= fds_before; }, 10000ms))
      << OpenFds() << " descriptors open, " << fds_before << " before";
  std::printf(
      "[ limits ] %d connections at once, max_connections 32: %d closed at once; "
      "descriptors %d before, %d after\n",
      kSockets, closed, fds_before, OpenFds());
  Echo("last");
}

}  // namespace
