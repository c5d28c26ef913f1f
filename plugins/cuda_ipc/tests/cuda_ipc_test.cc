// cuda_ipc's own tests. Without a driver: init() fails FERRY_UNAVAILABLE
// naming the driver, `ferry info` lists the plugin as unusable with that
// reason, and host-only mode works. With a GPU: device segments from
// another process (cuda_ipc_test_peer), a freed and reused allocation, VMM
// memory through the bounce buffer, and a sender killed while the receiver
// holds its handles. Each group skips where it cannot run ("no GPU: ...").
#include "testkit/endpoint.h"
#include "testkit/plugin.h"

#include "ferry_support/cuda_driver.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern char** environ;

namespace {

using ferry::testkit::Dest;
using ferry::testkit::Endpoint;
using ferry::testkit::Event;
using ferry::testkit::PlaceArgs;
using ferry::testkit::PumpUntil;
using ferry::testkit::Segment;
using ferry::testkit::SendArgs;
using std::chrono::seconds;

constexpr size_t kMiB = 1 << 20;

unsigned char Byte(size_t i, int seed) {  // as cuda_ipc_test_peer.cc
  return static_cast<unsigned char>((i * 7 + static_cast<size_t>(seed) * 31) & 0xff);
}

// Index of the first byte that differs from seed's pattern, or -1.
long Mismatch(const std::vector<unsigned char>& v, int seed) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != Byte(i, seed)) return static_cast<long>(i);
  }
  return -1;
}

std::shared_ptr<const ferry::Plugin> Load() {
  auto p = ferry::testkit::LoadPlugin(FERRY_CUDA_IPC_PLUGIN_DIR, "cuda_ipc");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p.value() : nullptr;
}

void HostOnly(bool on) {
  if (on) {
    setenv("FERRY_CUDA_IPC_HOST_ONLY", "1", 1);
  } else {
    unsetenv("FERRY_CUDA_IPC_HOST_ONLY");
  }
}

// ------------------------------------------------------------------------
// Without a driver

TEST(NoDriver, InitFailsUnavailableNamingTheDriver) {
  std::string why;
  if (ferry_cuda::Driver::Get(&why) != nullptr) GTEST_SKIP() << "a driver is present";
  HostOnly(false);
  auto plugin = Load();
  ASSERT_NE(plugin, nullptr);
  char text[512] = "";
  ferry_error_buf_t err{FERRY_ERROR_BUF_STRUCT_SIZE, 0, text, sizeof text};
  ferry_init_args_t args{};
  args.struct_size = FERRY_INIT_ARGS_STRUCT_SIZE;
  ferry_context_t* ctx = nullptr;
  EXPECT_EQ(plugin->vtable()->init(&args, &ctx, &err), FERRY_UNAVAILABLE);
  EXPECT_NE(std::string(text).find("NVIDIA driver"), std::string::npos) << text;
  EXPECT_NE(std::string(text).find(why), std::string::npos) << text;
}

TEST(NoDriver, FerryInfoListsItUnusableWithTheReason) {
  if (ferry_cuda::Driver::Get() != nullptr) GTEST_SKIP() << "a driver is present";
  HostOnly(false);
  const std::string cmd = std::string("FERRY_PLUGIN_PATH='") + FERRY_CUDA_IPC_PLUGIN_DIR +
                          "' '" + FERRY_INFO_EXE + "' cuda_ipc 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  EXPECT_NE(out.find("cuda_ipc"), std::string::npos) << out;
  const size_t line = out.find("usable        no:");
  ASSERT_NE(line, std::string::npos) << out;
  const std::string reason = out.substr(line, out.find('\n', line) - line);
  EXPECT_NE(reason.find("UNAVAILABLE"), std::string::npos) << reason;
  EXPECT_NE(reason.find("cuda_ipc: no NVIDIA driver on this machine"), std::string::npos)
      << reason;
}

// ------------------------------------------------------------------------
// Host-only mode (the conformance suite runs in it too)

class HostOnlyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostOnly(true);
    plugin_ = Load();
    ASSERT_NE(plugin_, nullptr);
  }
  void TearDown() override { HostOnly(false); }
  std::shared_ptr<const ferry::Plugin> plugin_;
};

TEST_F(HostOnlyTest, ReportsHostMemoryLowPriorityAndItsDomain) {
  Endpoint ep(plugin_);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  const ferry_context_info_t& info = ep.t().info();
  EXPECT_EQ(info.memory_kinds, FERRY_MEM_HOST);
  EXPECT_EQ(info.priority, 5);
  const uint64_t caps =
      FERRY_CAP_WAKEUP_FD | FERRY_CAP_DETECTS_PEER_DEATH | FERRY_CAP_ORDERED;
  EXPECT_EQ(info.caps & caps, caps);
  const std::string domain = ep.t().domain();
  EXPECT_EQ(domain.rfind("host=", 0), 0u) << domain;
  EXPECT_NE(domain.find(";ipc="), std::string::npos) << domain;
  EXPECT_NE(domain.find(";net="), std::string::npos) << domain;
  EXPECT_NE(ep.t().description().find("HOST-ONLY"), std::string::npos);
}

TEST_F(HostOnlyTest, AnUnknownProducerWaitIsRefusedNamingTheChoices) {
  setenv("FERRY_CUDA_IPC_PRODUCER_WAIT", "sometimes", 1);
  char text[512] = "";
  ferry_error_buf_t err{FERRY_ERROR_BUF_STRUCT_SIZE, 0, text, sizeof text};
  ferry_init_args_t args{};
  args.struct_size = FERRY_INIT_ARGS_STRUCT_SIZE;
  ferry_context_t* ctx = nullptr;
  const ferry_status_t st = plugin_->vtable()->init(&args, &ctx, &err);
  unsetenv("FERRY_CUDA_IPC_PRODUCER_WAIT");
  EXPECT_EQ(st, FERRY_INVALID_ARGUMENT) << text;
  EXPECT_NE(std::string(text).find("producer_wait is 'sometimes'"), std::string::npos)
      << text;
  EXPECT_NE(std::string(text).find("'host' or 'gpu'"), std::string::npos) << text;
  if (st == FERRY_OK) plugin_->vtable()->fini(ctx);
}

TEST_F(HostOnlyTest, DeviceMemoryIsRefusedAndHostCopiesWork) {
  Endpoint a(plugin_), b(plugin_);
  ASSERT_TRUE(a.ok() && b.ok());
  ferry::testkit::Link link;
  ASSERT_TRUE(ferry::testkit::Connect(&a, &b, "", &link));
  EXPECT_EQ(link.address.rfind("unix:@ferry-cuda-ipc-", 0), 0u) << link.address;
  int fake = 0;
  ferry::Status st = a.t().Send(
      link.client,
      SendArgs("h", {Segment(&fake, sizeof fake, FERRY_DEVICE_CUDA)}, nullptr));
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT);
  const ferry_transport_vtable_t* vt = plugin_->vtable();
  void* p = nullptr;
  EXPECT_EQ(vt->mem_alloc(a.t().context(), {FERRY_DEVICE_CUDA, 0}, 64, &p, nullptr),
            FERRY_INVALID_ARGUMENT);
  char src[5] = "abcd", dst[5] = "";
  EXPECT_EQ(vt->mem_copy(a.t().context(), dst, {FERRY_DEVICE_CPU, 0}, src,
                         {FERRY_DEVICE_CPU, 0}, 5, FERRY_STREAM_READY, nullptr),
            FERRY_OK);
  EXPECT_STREQ(dst, "abcd");
  // Host segments arrive inline, header and all.
  std::vector<unsigned char> big(3 * kMiB);
  for (size_t i = 0; i < big.size(); ++i) big[i] = Byte(i, 9);
  ASSERT_TRUE(
      a.t()
          .Send(link.client,
                SendArgs("hdr", {Segment("xy", 2), Segment(big.data(), big.size())},
                         nullptr))
          .ok());
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return b.Has(FERRY_EV_ARRIVAL); }));
  Event e = b.Take(FERRY_EV_ARRIVAL);
  EXPECT_EQ(e.header, "hdr");
  ASSERT_EQ(e.segments.size(), 2u);
  EXPECT_TRUE(e.segments[1].is_inline);
  EXPECT_EQ(Mismatch(std::vector<unsigned char>(e.segments[1].bytes.begin(),
                                                e.segments[1].bytes.end()),
                     9),
            -1);
  EXPECT_TRUE(b.t().Discard(link.server, e.msg_id).ok());
  ferry::testkit::CloseLink(&a, &b, link);
}

// ------------------------------------------------------------------------
// With a GPU

// The other process, its stdout read line by line.
class Peer {
 public:
  Peer(const std::string& address, const std::string& mode) {
    int fds[2];
    if (pipe(fds) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    const char* argv[] = {FERRY_CUDA_IPC_TEST_PEER, address.c_str(), mode.c_str(),
                          nullptr};
    if (posix_spawn(&pid_, FERRY_CUDA_IPC_TEST_PEER, &fa, nullptr,
                    const_cast<char**>(argv), environ) != 0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fds[0];
  }
  ~Peer() {
    Kill();
    if (out_ >= 0) close(out_);
  }
  bool started() const { return pid_ > 0; }
  // Pumps `ep` until the peer printed `line` (true) or an error / EOF.
  bool WaitFor(Endpoint* ep, const std::string& line, std::string* got = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      size_t nl;
      while ((nl = buf_.find('\n')) != std::string::npos) {
        const std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (got != nullptr) *got = l;
        if (l == line) return true;
        if (l.rfind("error", 0) == 0) {
          ADD_FAILURE() << "peer: " << l;
          return false;
        }
        if (got != nullptr) return true;  // any line
      }
      if (ep != nullptr) ep->PollOnce();
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, ep != nullptr ? 1 : 100) > 0) {
        char b[512];
        const ssize_t n = read(out_, b, sizeof b);
        if (n <= 0) return false;
        buf_.append(b, static_cast<size_t>(n));
      }
    }
    return false;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
};

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    cu_ = ferry_cuda::Driver::Get(&why);
    if (cu_ == nullptr) GTEST_SKIP() << "no GPU: " << why;
    HostOnly(false);
    plugin_ = Load();
    ASSERT_NE(plugin_, nullptr);
    ep_ = std::make_unique<Endpoint>(plugin_);
    ASSERT_TRUE(ep_->ok()) << ep_->status().ToString();
    vt_ = plugin_->vtable();
    ctx_ = ep_->t().context();
  }
  void TearDown() override {
    for (void* p : device_) vt_->mem_free(ctx_, kCuda0, p);
    if (ep_ && conn_ != nullptr) {
      ep_->t().Close(conn_);
      PumpUntil({ep_.get()}, [&] { return ep_->Has(FERRY_EV_CLOSED, conn_); });
    }
    if (ep_ && listener_ != nullptr) ep_->t().CloseListener(listener_);
  }
  // Listens, starts the peer in `mode`, takes its connection.
  std::unique_ptr<Peer> StartPeer(const std::string& mode) {
    if (listener_ == nullptr) address_ = ep_->Listen("", &listener_);
    auto peer = std::make_unique<Peer>(address_, mode);
    EXPECT_TRUE(peer->started());
    EXPECT_TRUE(PumpUntil({ep_.get()}, [&] { return ep_->Has(FERRY_EV_ACCEPTED); }));
    conn_ = ep_->Take(FERRY_EV_ACCEPTED).conn;
    EXPECT_TRUE(peer->WaitFor(ep_.get(), "ready"));
    return peer;
  }
  bool NextArrival(Event* e) {
    if (!PumpUntil(
            {ep_.get()}, [&] { return ep_->Has(FERRY_EV_ARRIVAL, conn_); },
            seconds(60))) {
      return false;
    }
    *e = ep_->Take(FERRY_EV_ARRIVAL, conn_);
    return true;
  }
  void* DeviceBuffer(uint64_t n) {
    void* p = nullptr;
    EXPECT_EQ(vt_->mem_alloc(ctx_, kCuda0, n, &p, nullptr), FERRY_OK);
    if (p != nullptr) device_.push_back(p);
    return p;
  }
  std::vector<unsigned char> ReadBack(const void* dev_ptr, uint64_t n) {
    std::vector<unsigned char> v(n);
    char text[256] = "";
    ferry_error_buf_t err{FERRY_ERROR_BUF_STRUCT_SIZE, 0, text, sizeof text};
    EXPECT_EQ(vt_->mem_copy(ctx_, v.data(), {FERRY_DEVICE_CPU, 0}, dev_ptr, kCuda0, n,
                            FERRY_STREAM_READY, &err),
              FERRY_OK)
        << text;
    return v;
  }
  ferry_status_t PlaceAndWait(const Event& e, std::vector<ferry_place_dest_t> dests,
                              std::string* message = nullptr) {
    int cookie = 0;
    ferry::Status st = ep_->t().Place(conn_, PlaceArgs(e.msg_id, dests, &cookie));
    if (!st.ok()) return st.code();
    EXPECT_TRUE(PumpUntil(
        {ep_.get()}, [&] { return ep_->Has(FERRY_EV_PLACE_DONE, conn_); }, seconds(60)));
    Event done = ep_->Take(FERRY_EV_PLACE_DONE, conn_);
    if (message != nullptr) *message = done.message;
    return done.status;
  }
  static ferry_place_dest_t DeviceDest(void* p, uint64_t n) {
    ferry_place_dest_t d = Dest(p, n);
    d.device = {FERRY_DEVICE_CUDA, 0};
    return d;
  }

  static constexpr ferry_device_t kCuda0 = {FERRY_DEVICE_CUDA, 0};
  const ferry_cuda::Driver* cu_ = nullptr;
  std::shared_ptr<const ferry::Plugin> plugin_;
  std::unique_ptr<Endpoint> ep_;
  const ferry_transport_vtable_t* vt_ = nullptr;
  ferry_context_t* ctx_ = nullptr;
  ferry_listener_t* listener_ = nullptr;
  std::string address_;
  ferry_conn_t* conn_ = nullptr;
  std::vector<void*> device_;
};

TEST_F(DeviceTest, InfoAndMemoryServices) {
  const ferry_context_info_t& info = ep_->t().info();
  EXPECT_EQ(info.memory_kinds, FERRY_MEM_HOST | FERRY_MEM_CUDA);
  EXPECT_NE(info.caps & FERRY_CAP_ZERO_COPY_RECV, 0u);
  void* a = DeviceBuffer(3 * kMiB);
  ASSERT_NE(a, nullptr);
  std::vector<unsigned char> v(3 * kMiB);
  for (size_t i = 0; i < v.size(); ++i) v[i] = Byte(i, 11);
  EXPECT_EQ(vt_->mem_copy(ctx_, a, kCuda0, v.data(), {FERRY_DEVICE_CPU, 0}, v.size(),
                          FERRY_STREAM_LEGACY, nullptr),
            FERRY_OK);
  EXPECT_EQ(Mismatch(ReadBack(a, v.size()), 11), -1);
  // A freed block comes back from the pool for the same size class.
  vt_->mem_free(ctx_, kCuda0, a);
  device_.clear();
  void* b = DeviceBuffer(3 * kMiB - 5);
  EXPECT_EQ(a, b);
  void* huge = nullptr;
  EXPECT_EQ(vt_->mem_alloc(ctx_, kCuda0, uint64_t{1} << 50, &huge, nullptr),
            FERRY_RESOURCE_EXHAUSTED);
  EXPECT_EQ(vt_->mem_alloc(ctx_, {FERRY_DEVICE_CUDA, 999}, 64, &huge, nullptr),
            FERRY_INVALID_ARGUMENT);
}

TEST_F(DeviceTest, MixedMessageFromAnotherProcess) {
  auto peer = StartPeer("mixed");
  Event e;
  ASSERT_TRUE(NextArrival(&e));
  ASSERT_EQ(e.segments.size(), 3u);
  EXPECT_TRUE(e.segments[0].is_inline);
  EXPECT_EQ(e.segments[1].device.type, FERRY_DEVICE_CUDA);
  EXPECT_EQ(e.segments[2].device.type, FERRY_DEVICE_CUDA);
  EXPECT_FALSE(e.segments[1].is_inline);
  std::vector<unsigned char> host0(e.segments[0].bytes.begin(),
                                   e.segments[0].bytes.end());
  EXPECT_EQ(Mismatch(host0, 3), -1);
  void* d1 = DeviceBuffer(kMiB);
  std::vector<unsigned char> h2(8 * kMiB);  // device -> host memory
  std::string msg;
  ASSERT_EQ(
      PlaceAndWait(
          e, {Dest(nullptr, 0), DeviceDest(d1, kMiB), Dest(h2.data(), h2.size())}, &msg),
      FERRY_OK)
      << msg;
  EXPECT_EQ(Mismatch(ReadBack(d1, kMiB), 4), -1);
  EXPECT_EQ(Mismatch(h2, 5), -1) << "the segment written on the sender's stream";
  EXPECT_TRUE(peer->WaitFor(ep_.get(), "done"));
}

TEST_F(DeviceTest, FreedAndReusedAllocationArrivesWithTheNewBytes) {
  auto peer = StartPeer("reuse");
  void* d = DeviceBuffer(kMiB);
  for (int seed : {1, 2}) {
    Event e;
    ASSERT_TRUE(NextArrival(&e));
    EXPECT_EQ(e.header, "seed=" + std::to_string(seed));
    std::string msg;
    ASSERT_EQ(PlaceAndWait(e, {DeviceDest(d, kMiB)}, &msg), FERRY_OK) << msg;
    EXPECT_EQ(Mismatch(ReadBack(d, kMiB), seed), -1) << "message " << seed;
    if (seed == 1) {
      std::string line;
      ASSERT_TRUE(peer->WaitFor(ep_.get(), "", &line));
      RecordProperty("address_reused", line);
    }
  }
  EXPECT_TRUE(peer->WaitFor(ep_.get(), "done"));
}

TEST_F(DeviceTest, VmmMemoryGoesThroughTheBounceBuffer) {
  auto peer = StartPeer("vmm");
  Event e;
  ASSERT_TRUE(NextArrival(&e));
  ASSERT_EQ(e.segments.size(), 1u);
  const uint64_t n = e.segments[0].length;
  void* d = DeviceBuffer(n);
  std::string msg;
  ASSERT_EQ(PlaceAndWait(e, {DeviceDest(d, n)}, &msg), FERRY_OK) << msg;
  EXPECT_EQ(Mismatch(ReadBack(d, n), 6), -1);
  EXPECT_TRUE(peer->WaitFor(ep_.get(), "done"));
}

TEST_F(DeviceTest, SenderKilledWhileItsHandleIsOpen) {
  auto peer = StartPeer("hang");
  void* d = DeviceBuffer(kMiB);
  Event e;
  ASSERT_TRUE(NextArrival(&e));
  std::string msg;
  ASSERT_EQ(PlaceAndWait(e, {DeviceDest(d, kMiB)}, &msg), FERRY_OK) << msg;
  EXPECT_EQ(Mismatch(ReadBack(d, kMiB), 7), -1);
  // The handle is cached and open; a second message is held; then the
  // sender dies.
  ASSERT_TRUE(NextArrival(&e));
  ASSERT_TRUE(peer->WaitFor(ep_.get(), "sent"));
  peer->Kill();
  // Placing the held arrival now either works (the mapping keeps the
  // memory alive) or fails with the break; nothing crashes, then the
  // connection reports PEER_GONE.
  const ferry_status_t placed = PlaceAndWait(e, {DeviceDest(d, kMiB)}, &msg);
  EXPECT_TRUE(placed == FERRY_OK || placed == FERRY_PEER_GONE) << placed << " " << msg;
  ASSERT_TRUE(PumpUntil(
      {ep_.get()}, [&] { return ep_->Has(FERRY_EV_CONN_BROKEN, conn_); }, seconds(30)));
  EXPECT_EQ(ep_->Take(FERRY_EV_CONN_BROKEN, conn_).status, FERRY_PEER_GONE);
  // A new peer still works.
  ep_->t().Close(conn_);
  ASSERT_TRUE(PumpUntil({ep_.get()}, [&] { return ep_->Has(FERRY_EV_CLOSED, conn_); }));
  ep_->Take(FERRY_EV_CLOSED, conn_);
  conn_ = nullptr;
  auto again = StartPeer("reuse");
  ASSERT_TRUE(NextArrival(&e));
  ASSERT_EQ(PlaceAndWait(e, {DeviceDest(d, kMiB)}, &msg), FERRY_OK) << msg;
  EXPECT_EQ(Mismatch(ReadBack(d, kMiB), 1), -1);
}

}  // namespace
