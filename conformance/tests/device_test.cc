// DEV-*: device memory (ABI 0.2). Run for a context whose memory_kinds
// include FERRY_MEM_CUDA, on a machine whose CUDA driver sees a GPU; not
// run otherwise, saying which ("plugin moves host memory only", "no GPU:
// <the driver's reason>"). Built only with the CUDA toolkit's headers
// (device_unavailable_test.cc registers the same requirements otherwise).
//
// The plugin's own memory services (mem_alloc, mem_copy) allocate and fill
// the buffers wherever they can, so the requirements measure the plugin;
// the driver provides the rest: streams, memsets, an application's
// cuMemAlloc. Device segments travel between two processes (CUDA IPC
// refuses a handle opened in the exporting process): this process sends,
// the device peer (harness/device_peer.cc) receives, checks the bytes
// against the description in each header and answers "ok <n>" or
// "bad <n> <what differs>".
#include "harness/device.h"
#include "harness/conformance_test.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ferry::conformance {
namespace {

// CUDA initialisation in the peer and the first IPC open of a buffer take
// far longer than a host message; still a hang detector, not a timing.
constexpr milliseconds kDeviceTimeout{30000};

// One segment of a message to the device peer, and the peer's check: a
// placement ('d' device, 'h' host) and what the bytes must be
// (harness/device.h, CheckBytes).
struct DevSeg {
  const void* data;
  uint64_t length;
  ferry_device_t device;
  uint64_t stream;
  std::string check;  // "dp17": place in device memory, pattern 17
};

std::string PatternCheck(char place, uint64_t seed) {
  return std::string(1, place) + "p" + std::to_string(seed);
}

class DeviceTest : public ConformanceTest {
 protected:
  void SetUp() override {
    ConformanceTest::SetUp();
    if (IsSkipped() || HasFatalFailure() || a() == nullptr) return;
    if ((a()->info().memory_kinds & FERRY_MEM_CUDA) == 0) {
      FERRY_NOT_RUN("plugin moves host memory only");
    }
    std::string why;
    cu_ = CurrentGpu(&why);
    if (cu_ == nullptr) FERRY_NOT_RUN("no GPU: " + why);
    mem_ = std::make_unique<MemoryServices>(a());
    RecordProperty("cuda_driver_version", std::to_string(cu_->version));
  }

  void TearDown() override {
    // A send still pending may read our buffers: close the connections
    // first (the base teardown then finds them closed and checks the
    // rest), free the buffers while the context that allocated them
    // lives, then let the base finish the contexts.
    for (ferry_conn_t* conn : pump().UnclosedConns()) {
      pump().ClearArrivalHandler(conn);
      for (uint64_t msg_id : pump().UnansweredArrivals(conn)) Discard(conn, msg_id);
      CloseConn(conn);
    }
    pump().RunQuietlyUntil([&] { return pump().ClosingConns().empty(); }, kOpTimeout);
    // A receiver may still hold our memory mapped: gone before it is freed.
    for (PeerProcess* peer : peers_) peer->Kill();
    buffers_.clear();
    ConformanceTest::TearDown();
  }

  uint64_t Limit() const {
    const uint64_t max = a()->info().max_message_size;
    return max > 64 ? max - 64 : 0;  // room for the header
  }

  // A fixture-owned device buffer (freed at teardown); nullptr after a
  // failure.
  DeviceBuffer* NewDeviceBuffer(uint64_t length,
                                DeviceBuffer::From from = DeviceBuffer::From::kPlugin) {
    std::unique_ptr<DeviceBuffer> b = AllocateDevice(length, from);
    if (!b) return nullptr;
    buffers_.push_back(std::move(b));
    return buffers_.back().get();
  }
  std::unique_ptr<DeviceBuffer> AllocateDevice(uint64_t length, DeviceBuffer::From from) {
    std::string error;
    auto b = DeviceBuffer::Allocate(mem_.get(), length, from, &error);
    if (!b) ADD_FAILURE() << "allocating " << Bytes(length) << " on cuda:0: " << error;
    return b;
  }
  // Writes the pattern of `seed` to device memory (the plugin's mem_copy).
  ::testing::AssertionResult FillDevice(void* dst, uint64_t length, uint64_t seed) {
    std::vector<unsigned char> host(length);
    FillPattern(host.data(), length, seed);
    std::string error = ToDevice(*mem_, dst, host.data(), length);
    if (error.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "filling " << Bytes(length) << ": " << error;
  }
  // Fixture-owned host bytes (they must outlive SEND_DONE).
  const unsigned char* HostBytes(uint64_t length, uint64_t seed) {
    host_.emplace_back(length);
    FillPattern(host_.back().data(), length, seed);
    return host_.back().data();
  }

  // Listens on a(), starts a device peer, returns the accepted conn once
  // the peer (its GPU set up) said "ready".
  ferry_conn_t* AcceptDevicePeer(PeerProcess** peer) {
    std::string address;
    ferry_listener_t* listener = Listen(a(), &address);
    if (listener == nullptr) return nullptr;
    *peer = SpawnPeer("device-receive", address);
    if (*peer == nullptr) return nullptr;
    peers_.push_back(*peer);
    ferry_conn_t* conn = nullptr;
    if (!pump().RunUntil(
            [&] { return (conn = conn ? conn : TakeAccepted(listener)) != nullptr; },
            kDeviceTimeout, "ACCEPTED from the device peer process")) {
      return nullptr;
    }
    if (!WaitPeerSays(*peer, "ready", kDeviceTimeout)) return nullptr;
    return conn;
  }

  // Posts message `n` (header "<n> <check>..."), retrying on back-pressure;
  // the tracked cookie, or nullptr after a failure. *call_ms: how long the
  // accepted send() call took.
  void* SendDevice(ferry_conn_t* conn, int n, const std::vector<DevSeg>& segs,
                   int64_t* call_ms = nullptr) {
    std::string header = std::to_string(n);
    uint64_t total = 0;
    std::vector<ferry_segment_t> raw(segs.size());
    for (size_t i = 0; i < segs.size(); ++i) {
      header += " " + segs[i].check;
      raw[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
      raw[i].data = segs[i].data;
      raw[i].length = segs[i].length;
      raw[i].device = segs[i].device;
      raw[i].stream = segs[i].stream;
      total += segs[i].length;
    }
    ferry_send_args_t args{};
    args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
    args.num_segments = static_cast<uint32_t>(raw.size());
    args.header = header.data();
    args.header_len = header.size();
    args.segments = raw.data();
    args.segment_stride = sizeof(ferry_segment_t);
    Transport* t = pump().TransportOf(conn);
    const auto deadline = Clock::now() + kOpTimeout;
    while (true) {
      void* cookie = tracker().Begin(OpKind::kSend, conn);
      args.user_data = cookie;
      const auto start = Clock::now();
      Status s = t->Send(conn, args);
      if (call_ms != nullptr) *call_ms = ElapsedMs(start);
      ExpectPrompt(start, "send() of " + Bytes(total) + " in " +
                              std::to_string(raw.size()) + " segment(s) '" + header +
                              "'");
      if (s.ok()) {
        tracker().Posted(cookie);
        return cookie;
      }
      tracker().Refused(cookie);
      if (s.code() != FERRY_UNAVAILABLE) {
        ADD_FAILURE() << "send() of message '" << header << "' (" << Bytes(total)
                      << ") was refused: " << s.ToString();
        return nullptr;
      }
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "send() kept returning FERRY_UNAVAILABLE for 10 s";
        return nullptr;
      }
      if (pump().PollOnce() == 0) std::this_thread::yield();
    }
  }

  // Sends message `n` and waits for the peer's verdict ("ok <n>") and for
  // SEND_DONE (OK).
  bool Deliver(ferry_conn_t* conn, PeerProcess* peer, int n,
               const std::vector<DevSeg>& segs) {
    void* cookie = SendDevice(conn, n, segs);
    if (cookie == nullptr) return false;
    const bool verdict = WaitPeerSays(peer, "ok " + std::to_string(n), kDeviceTimeout);
    const bool done =
        WaitOk(cookie, "SEND_DONE of message " + std::to_string(n), kDeviceTimeout);
    return verdict && done;
  }

  const ferry_cuda::Driver* cu_ = nullptr;
  std::unique_ptr<MemoryServices> mem_;

 private:
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::vector<PeerProcess*> peers_;  // owned by the base fixture
  std::deque<std::vector<unsigned char>> host_;
};

TEST_P(DeviceTest, MemoryServices) {
  ASSERT_TRUE(mem_->offered())
      << "the context reports FERRY_MEM_CUDA but the vtable lacks " << mem_->Missing()
      << ": a plugin that moves device memory offers mem_alloc, mem_free and "
         "mem_copy, all three (the core allocates device receive buffers and "
         "stages device segments through host memory with them)";
  const uint64_t n = kMiB + 3;  // not a multiple of anything
  std::string error;
  auto d1 = DeviceBuffer::Allocate(mem_.get(), n, DeviceBuffer::From::kPlugin, &error);
  ASSERT_TRUE(d1) << error;
  CUmemorytype type{};
  EXPECT_EQ(CuError(cu_->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                               DevPtr(d1->data())),
                    "cuPointerGetAttribute(MEMORY_TYPE) of mem_alloc's pointer"),
            "");
  EXPECT_EQ(type, CU_MEMORYTYPE_DEVICE)
      << "mem_alloc(cuda:0) did not return device memory";
  int ordinal = -1;
  EXPECT_EQ(
      CuError(cu_->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                         DevPtr(d1->data())),
              "cuPointerGetAttribute(DEVICE_ORDINAL)"),
      "");
  EXPECT_EQ(ordinal, 0) << "mem_alloc(cuda:0) returned memory of another GPU";

  // Host -> device here, device -> host from a thread that never made a
  // CUDA context current: the services are callable from any thread.
  std::vector<unsigned char> src(n), back(n, 0xEE);
  FillPattern(src.data(), n, 11);
  Status s =
      mem_->Copy(d1->data(), kCuda0, src.data(), kHostDevice, n, FERRY_STREAM_READY);
  ASSERT_TRUE(s.ok()) << "mem_copy(host -> cuda:0, " << Bytes(n) << "): " << s.ToString();
  std::thread([&] {
    s = mem_->Copy(back.data(), kHostDevice, d1->data(), kCuda0, n, FERRY_STREAM_READY);
  }).join();
  ASSERT_TRUE(s.ok()) << "mem_copy(cuda:0 -> host) from a thread with no current CUDA "
                         "context: "
                      << s.ToString();
  EXPECT_EQ(PatternMismatch(back.data(), n, 11), -1)
      << "host -> device -> host round trip through mem_copy changed the bytes";

  // Device -> device, then back to the host.
  auto d2 = DeviceBuffer::Allocate(mem_.get(), n, DeviceBuffer::From::kPlugin, &error);
  ASSERT_TRUE(d2) << error;
  s = mem_->Copy(d2->data(), kCuda0, d1->data(), kCuda0, n, FERRY_STREAM_READY);
  ASSERT_TRUE(s.ok()) << "mem_copy(cuda:0 -> cuda:0): " << s.ToString();
  std::fill(back.begin(), back.end(), 0xEE);
  s = mem_->Copy(back.data(), kHostDevice, d2->data(), kCuda0, n, FERRY_STREAM_READY);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(PatternMismatch(back.data(), n, 11), -1)
      << "a device -> device copy through mem_copy changed the bytes";

  // After the work of src_stream: a memset still queued behind a held
  // stream when mem_copy is called must be in what it copies.
  {
    ProducerStream producer(cu_);
    ASSERT_EQ(producer.error(), "");
    const bool held = producer.Hold();
    ASSERT_EQ(CuError(cu_->cuMemsetD32Async(DevPtr(d2->data()), 0x600DF00Du, n / 4,
                                            producer.stream()),
                      "cuMemsetD32Async"),
              "");
    std::fill(back.begin(), back.end(), 0xEE);
    // The gate opens from another thread a moment after mem_copy started
    // waiting (mem_copy is synchronous: it returns once dst holds the bytes).
    std::thread opener([&] {
      std::this_thread::sleep_for(milliseconds(200));
      producer.Release();
    });
    s = mem_->Copy(back.data(), kHostDevice, d2->data(), kCuda0, n, producer.handle());
    opener.join();
    ASSERT_TRUE(s.ok()) << "mem_copy(cuda:0 -> host, src_stream = a stream): "
                        << s.ToString();
    EXPECT_EQ(CheckBytes(back.data(), (n / 4) * 4, 'c', 0x600DF00Du), "")
        << "mem_copy did not wait for the work queued on src_stream"
        << (held ? "" : " (cuLaunchHostFunc missing: the memset was not held back)");
  }

  // An absurd size is refused with a status, not a crash.
  void* huge = nullptr;
  s = mem_->Alloc(kCuda0, uint64_t{1} << 60, &huge);
  EXPECT_TRUE(s.code() == FERRY_RESOURCE_EXHAUSTED || s.code() == FERRY_INVALID_ARGUMENT)
      << "mem_alloc(cuda:0, 1 EiB): expected RESOURCE_EXHAUSTED (or INVALID_ARGUMENT), "
         "got "
      << s.ToString();
  if (s.ok() && huge != nullptr) mem_->Free(kCuda0, huge);
  if (!s.ok()) {
    EXPECT_FALSE(s.message().empty()) << "mem_alloc failed without a message";
  }
  // A GPU that does not exist is a device the context does not move.
  void* nowhere = nullptr;
  s = mem_->Alloc({FERRY_DEVICE_CUDA, cu_->devices}, 4096, &nowhere);
  EXPECT_EQ(StatusText(s.code()), StatusText(FERRY_INVALID_ARGUMENT))
      << "mem_alloc(cuda:" << cu_->devices << ") on a machine with " << cu_->devices
      << " GPU(s): " << s.ToString();
  if (s.ok() && nowhere != nullptr)
    mem_->Free({FERRY_DEVICE_CUDA, cu_->devices}, nowhere);
  // The refusals left the allocator working.
  d1.reset();
  auto d3 = DeviceBuffer::Allocate(mem_.get(), 4096, DeviceBuffer::From::kPlugin, &error);
  EXPECT_TRUE(d3) << "after the refusals: " << error;
}

TEST_P(DeviceTest, SegmentsBetweenProcesses) {
  PeerProcess* peer = nullptr;
  ferry_conn_t* conn = AcceptDevicePeer(&peer);
  ASSERT_NE(conn, nullptr);
  int n = 0;
  std::string skipped;
  // Device memory into device memory, at each size.
  for (uint64_t size : {uint64_t{1}, 4 * kKiB, kMiB, 64 * kMiB}) {
    if (size > Limit()) {
      skipped += Bytes(size) + " ";
      continue;
    }
    SCOPED_TRACE("device -> device, " + Bytes(size));
    DeviceBuffer* b = NewDeviceBuffer(size);
    ASSERT_NE(b, nullptr);
    const uint64_t seed = 2000 + size;
    ASSERT_TRUE(FillDevice(b->data(), size, seed));
    ASSERT_TRUE(Deliver(
        conn, peer, ++n,
        {{b->data(), size, kCuda0, FERRY_STREAM_READY, PatternCheck('d', seed)}}));
  }
  if (!skipped.empty()) RecordProperty("sizes_over_max_message_size", skipped);
  // Device memory placed in host memory, and host memory in device memory.
  for (uint64_t size : {uint64_t{1}, kMiB}) {
    SCOPED_TRACE("device -> host, " + Bytes(size));
    DeviceBuffer* b = NewDeviceBuffer(size);
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(FillDevice(b->data(), size, 3000 + size));
    ASSERT_TRUE(Deliver(
        conn, peer, ++n,
        {{b->data(), size, kCuda0, FERRY_STREAM_READY, PatternCheck('h', 3000 + size)}}));
  }
  for (uint64_t size : {uint64_t{1}, kMiB}) {
    SCOPED_TRACE("host -> device, " + Bytes(size));
    ASSERT_TRUE(Deliver(conn, peer, ++n,
                        {{HostBytes(size, 4000 + size), size, kHostDevice,
                          FERRY_STREAM_READY, PatternCheck('d', 4000 + size)}}));
  }
  // One message mixing both kinds both ways, one device segment at an odd
  // offset inside a larger cuMemAlloc block (what a framework's caching
  // allocator hands out: not the start of an allocation).
  DeviceBuffer* dev = NewDeviceBuffer(kMiB);
  DeviceBuffer* block = NewDeviceBuffer(4 * kMiB, DeviceBuffer::From::kDriver);
  DeviceBuffer* tiny = NewDeviceBuffer(1);
  ASSERT_TRUE(dev != nullptr && block != nullptr && tiny != nullptr);
  const uint64_t odd = 4097, odd_len = kMiB + 3;
  ASSERT_TRUE(FillDevice(dev->data(), kMiB, 5001));
  ASSERT_TRUE(FillDevice(block->data() + odd, odd_len, 5003));
  ASSERT_TRUE(FillDevice(tiny->data(), 1, 5004));
  std::vector<DevSeg> mixed = {
      {HostBytes(4 * kKiB, 5000), 4 * kKiB, kHostDevice, 0, PatternCheck('h', 5000)},
      {dev->data(), kMiB, kCuda0, FERRY_STREAM_READY, PatternCheck('d', 5001)},
      {HostBytes(16, 5002), 16, kHostDevice, 0, PatternCheck('d', 5002)},
      {block->data() + odd, odd_len, kCuda0, FERRY_STREAM_READY, PatternCheck('h', 5003)},
      {tiny->data(), 1, kCuda0, FERRY_STREAM_READY, PatternCheck('d', 5004)},
  };
  if (mixed.size() > a()->info().max_segments) {
    mixed.resize(std::max<size_t>(2, a()->info().max_segments));
    RecordProperty("mixed_segments", std::to_string(mixed.size()));
  }
  SCOPED_TRACE("a message mixing host and device segments");
  EXPECT_TRUE(Deliver(conn, peer, ++n, mixed));
}

TEST_P(DeviceTest, ReadsAfterProducerStream) {
  PeerProcess* peer = nullptr;
  ferry_conn_t* conn = AcceptDevicePeer(&peer);
  ASSERT_NE(conn, nullptr);
  const uint64_t size = std::min<uint64_t>(256 * kMiB, Limit()) / 4 * 4;
  ASSERT_GT(size, 0u);
  DeviceBuffer* b = NewDeviceBuffer(size);
  ASSERT_NE(b, nullptr);
  ProducerStream producer(cu_);
  ASSERT_EQ(producer.error(), "");
  // The old contents, settled before the producer's work starts.
  ASSERT_EQ(
      CuError(cu_->cuMemsetD8Async(DevPtr(b->data()), 0x11, size, producer.stream()),
              "cuMemsetD8Async"),
      "");
  ASSERT_EQ(CuError(cu_->cuStreamSynchronize(producer.stream()), "cuStreamSynchronize"),
            "");
  // The producer's long write: held behind a gate when the driver allows,
  // then several back-to-back memsets of the whole buffer, the last one
  // writing the final value.
  const bool held = producer.Hold();
  const int writes = held ? 8 : 64;
  uint32_t final_word = 0;
  for (int i = 1; i <= writes; ++i) {
    final_word = 0x5A000000u | static_cast<uint32_t>(i);
    ASSERT_EQ(CuError(cu_->cuMemsetD32Async(DevPtr(b->data()), final_word, size / 4,
                                            producer.stream()),
                      "cuMemsetD32Async"),
              "");
  }
  char check[16];
  std::snprintf(check, sizeof check, "dc%08x", final_word);
  // Sent at once, without synchronising: the plugin orders its read.
  int64_t call_ms = 0;
  void* cookie = SendDevice(
      conn, 1, {{b->data(), size, kCuda0, producer.handle(), check}}, &call_ms);
  ASSERT_NE(cookie, nullptr);
  RecordProperty("send_call_ms", std::to_string(call_ms));
  RecordProperty("producer_held", held ? "yes" : "no (no cuLaunchHostFunc)");
  if (held) {
    // Long enough for a plugin that does not wait to have copied.
    pump().RunQuietlyUntil([] { return false; }, milliseconds(300));
    producer.Release();
  }
  EXPECT_FALSE(producer.opened_by_itself())
      << "send() returned only after its producer's stream ran (" << call_ms
      << " ms): the plugin must order its read after that work with an event, "
         "without blocking the host";
  EXPECT_TRUE(WaitPeerSays(peer, "ok 1", kDeviceTimeout))
      << "the receiver read a " << Bytes(size)
      << " device segment before the work queued on its producer's stream "
         "(segment.stream) had finished";
  EXPECT_TRUE(WaitOk(cookie, "SEND_DONE of the producer-stream segment", kDeviceTimeout));
}

TEST_P(DeviceTest, FreedAndReusedMemory) {
  PeerProcess* peer = nullptr;
  ferry_conn_t* conn = AcceptDevicePeer(&peer);
  ASSERT_NE(conn, nullptr);
  const uint64_t size = 4 * kMiB;
  int n = 0;
  for (DeviceBuffer::From from :
       {DeviceBuffer::From::kDriver, DeviceBuffer::From::kPlugin}) {
    const std::string allocator =
        from == DeviceBuffer::From::kDriver ? "cuMemAlloc" : "the plugin's mem_alloc";
    SCOPED_TRACE("memory from " + allocator);
    std::unique_ptr<DeviceBuffer> first = AllocateDevice(size, from);
    ASSERT_TRUE(first);
    const uint64_t seed_a = 6000 + 10 * n, seed_b = seed_a + 1;
    ASSERT_TRUE(FillDevice(first->data(), size, seed_a));
    ASSERT_TRUE(Deliver(
        conn, peer, ++n,
        {{first->data(), size, kCuda0, FERRY_STREAM_READY, PatternCheck('d', seed_a)}}));
    const void* old_address = first->data();
    first.reset();  // freed (SEND_DONE returned it to us)
    std::unique_ptr<DeviceBuffer> second = AllocateDevice(size, from);
    ASSERT_TRUE(second);
    const bool same = second->data() == old_address;
    RecordProperty(from == DeviceBuffer::From::kDriver ? "driver_reused_address"
                                                       : "plugin_reused_address",
                   same ? "yes" : "no");
    ASSERT_TRUE(FillDevice(second->data(), size, seed_b));
    EXPECT_TRUE(Deliver(
        conn, peer, ++n,
        {{second->data(), size, kCuda0, FERRY_STREAM_READY, PatternCheck('d', seed_b)}}))
        << "a segment sent from " << (same ? "the same address" : "a new allocation")
        << " after the first was freed did not arrive with its new bytes (a handle or "
           "mapping cached by raw address serves the freed allocation)";
  }
}

TEST_P(DeviceTest, ReceiverKilledWithHandleOpen) {
  PeerProcess* peer = nullptr;
  ferry_conn_t* conn = AcceptDevicePeer(&peer);
  ASSERT_NE(conn, nullptr);
  const uint64_t small = 4 * kMiB, big = std::min<uint64_t>(64 * kMiB, Limit());
  DeviceBuffer* x = NewDeviceBuffer(small);
  DeviceBuffer* y = NewDeviceBuffer(big);
  ASSERT_TRUE(x != nullptr && y != nullptr);
  ASSERT_TRUE(FillDevice(x->data(), small, 7001));
  ASSERT_TRUE(FillDevice(y->data(), big, 7002));
  // The receiver opens x's handle, then stops progressing for good.
  ASSERT_TRUE(
      Deliver(conn, peer, 1,
              {{x->data(), small, kCuda0, FERRY_STREAM_READY, PatternCheck('d', 7001)}}));
  ASSERT_TRUE(peer->Tell("stall"));
  ASSERT_TRUE(WaitPeerSays(peer, "stalled", kDeviceTimeout));
  std::vector<void*> sends = {
      SendDevice(conn, 2,
                 {{y->data(), big, kCuda0, FERRY_STREAM_READY, PatternCheck('d', 7002)}}),
      SendDevice(
          conn, 3,
          {{x->data(), small, kCuda0, FERRY_STREAM_READY, PatternCheck('d', 7001)}}),
  };
  for (void* c : sends) ASSERT_NE(c, nullptr);
  pump().Churn(20);
  peer->Kill();
  const auto killed = Clock::now();
  const bool detects = a()->HasCap(FERRY_CAP_DETECTS_PEER_DEATH);
  if (detects) {
    ASSERT_TRUE(pump().RunUntil([&] { return pump().IsBroken(conn); }, kOpTimeout,
                                "CONN_BROKEN after the receiver died"));
    EXPECT_EQ(StatusText(pump().BrokenStatus(conn)), StatusText(FERRY_PEER_GONE))
        << "a dead receiver must be reported as FERRY_PEER_GONE";
    RecordProperty("detection_ms", std::to_string(ElapsedMs(killed)));
  } else {
    // Only the core's heartbeats would notice: it then closes the
    // connection, which must still end every send.
    CloseConn(conn);
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        return std::all_of(sends.begin(), sends.end(),
                           [&](void* c) { return tracker().Done(c); });
      },
      kOpTimeout, "every send pending towards the dead receiver to end"));
  for (void* c : sends) {
    const ferry_status_t s = tracker().StatusOf(c);
    EXPECT_TRUE(s == FERRY_OK || s == FERRY_PEER_GONE ||
                (!detects && s == FERRY_CANCELLED))
        << "a send pending when the receiver died ended with " << StatusText(s) << ": "
        << tracker().MessageOf(c);
  }
  CloseConn(conn);
  EXPECT_TRUE(WaitClosed(conn));

  // The sender is unharmed: the same buffers reach a new receiver intact.
  PeerProcess* next = nullptr;
  ferry_conn_t* conn2 = AcceptDevicePeer(&next);
  ASSERT_NE(conn2, nullptr);
  std::vector<DevSeg> again = {
      {y->data(), big, kCuda0, FERRY_STREAM_READY, PatternCheck('d', 7002)},
      {x->data(), small, kCuda0, FERRY_STREAM_READY, PatternCheck('h', 7001)}};
  if (a()->info().max_segments < 2) again.resize(1);
  EXPECT_TRUE(Deliver(conn2, next, 4, again))
      << "after a receiver died holding handles, a new connection must still carry the "
         "same device buffers";
}

INSTANTIATE_TEST_SUITE_P(Plugins, DeviceTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
