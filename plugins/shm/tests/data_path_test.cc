// The two data paths for large segments, each shown by what only it can do,
// and a payload far larger than the ring.
//   CMA:  the receiver reads the sender's buffer, so SEND_DONE cannot come
//         before the receiver has placed the message.
//   ring: the bytes are copied into the ring, so a message that fits the
//         ring completes its send before anyone places it.
#include "shm_fixture.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace ferry_shm_test {
namespace {

std::string PeerAddress(Endpoint* e, ferry_conn_t* c) {
  auto a = e->t().PeerAddress(c);
  return a.ok() ? a.value() : a.status().ToString();
}

// Yama's ptrace_scope >= 1 forbids a child reading its parent's memory.
bool YamaRestricts() {
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  int v = 0;
  return f && (f >> v) && v >= 1;
}

class DataPathTest : public ShmTest {
 protected:
  // Sends one n-byte segment from a to b and shows it went through the
  // ring: its send completes before b places it (and the sender's buffer
  // may then be overwritten), and the placed bytes are intact.
  void ExpectRingCopied(Pair* p, size_t n, int seed, const char* why) {
    std::vector<unsigned char> out(n), in(n);
    FillPattern(out.data(), n, seed);
    ASSERT_TRUE(p->a->Send(p->client, "ring", {{out.data(), n}}, &out).ok());
    Event arrival, done;
    ASSERT_TRUE(PumpUntil({p->a.get(), p->b.get()}, [&] {
      return (arrival.type || p->b->TryTake(FERRY_EV_ARRIVAL, &arrival)) &&
             (done.type || p->a->TryTake(FERRY_EV_SEND_DONE, &done));
    })) << why;
    EXPECT_EQ(done.status, FERRY_OK);
    std::fill(out.begin(), out.end(), 0);  // the bytes are in the ring now
    ASSERT_TRUE(p->b->PlaceAll(arrival, {in.data()}, nullptr).ok());
    Event placed;
    ASSERT_TRUE(PumpUntil({p->a.get(), p->b.get()},
                          [&] { return p->b->TryTake(FERRY_EV_PLACE_DONE, &placed); }));
    EXPECT_EQ(placed.status, FERRY_OK) << placed.message;
    EXPECT_EQ(PatternMismatch(in.data(), n, seed), -1);
  }
};

TEST_F(DataPathTest, CmaSendCompletesOnlyAfterThePeerPlaced) {
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  ASSERT_NE(PeerAddress(p.a.get(), p.client).find("data=cma"), std::string::npos)
      << "cross-memory attach should work within one process: "
      << PeerAddress(p.a.get(), p.client);
  std::vector<unsigned char> out(1 << 20), in(1 << 20);
  FillPattern(out.data(), out.size(), 1);
  ASSERT_TRUE(p.a->Send(p.client, "cma", {{out.data(), out.size()}}, &out).ok());
  Event arrival, done;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                        [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
  ASSERT_EQ(arrival.segments.size(), 1u);
  EXPECT_EQ(arrival.segments[0].inline_data, nullptr) << "1 MiB must not arrive inline";
  // Nothing but the receiver's place() can complete this send.
  for (int i = 0; i < 2000; ++i) {
    p.a->PollOnce();
    p.b->PollOnce();
  }
  EXPECT_FALSE(p.a->TryTake(FERRY_EV_SEND_DONE, &done))
      << "a CMA send completed before the receiver read the buffer";
  ASSERT_TRUE(p.b->PlaceAll(arrival, {in.data()}, &in).ok());
  Event placed;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()}, [&] {
    return (placed.type || p.b->TryTake(FERRY_EV_PLACE_DONE, &placed)) &&
           (done.type || p.a->TryTake(FERRY_EV_SEND_DONE, &done));
  }));
  EXPECT_EQ(placed.status, FERRY_OK) << placed.message;
  EXPECT_EQ(done.status, FERRY_OK) << done.message;
  EXPECT_EQ(PatternMismatch(in.data(), in.size(), 1), -1);
  ClosePair(&p);
}

// Small messages are written into the ring inside send() when nothing is
// queued; a CMA send stays queued until the peer has read it. SEND_DONEs
// still come in posting order: an inline send posted behind a CMA send is
// not reported before it, and one posted before it is not held back.
TEST_F(DataPathTest, SendsCompleteInPostingOrderAcrossInlineAndCma) {
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  ASSERT_NE(PeerAddress(p.a.get(), p.client).find("data=cma"), std::string::npos)
      << PeerAddress(p.a.get(), p.client);
  int tags[4];
  const char small[64] = "small";
  std::vector<unsigned char> big(1 << 20), in(1 << 20);
  FillPattern(big.data(), big.size(), 7);
  ASSERT_TRUE(p.a->Send(p.client, "A", {{small, sizeof small}}, &tags[0]).ok());
  ASSERT_TRUE(p.a->Send(p.client, "B", {{big.data(), big.size()}}, &tags[1]).ok());
  ASSERT_TRUE(p.a->Send(p.client, "C", {{small, sizeof small}}, &tags[2]).ok());
  ASSERT_TRUE(p.a->Send(p.client, "D", {}, &tags[3]).ok());
  Event first, second;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()}, [&] {
    return (first.type || p.b->TryTake(FERRY_EV_ARRIVAL, &first)) &&
           (second.type || p.a->TryTake(FERRY_EV_SEND_DONE, &second));
  }));
  EXPECT_EQ(second.user_data, &tags[0]) << "the first send completes first";
  ASSERT_TRUE(p.b->t().Discard(p.server, first.msg_id).ok());
  Event cma;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                        [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &cma); }));
  ASSERT_EQ(cma.header, "B");
  for (int i = 0; i < 2000; ++i) {
    p.a->PollOnce();
    p.b->PollOnce();
  }
  Event early;
  EXPECT_FALSE(p.a->TryTake(FERRY_EV_SEND_DONE, &early))
      << "a send posted behind an unread CMA send completed before it";
  ASSERT_TRUE(p.b->PlaceAll(cma, {in.data()}, nullptr).ok());
  std::vector<void*> order;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()}, [&] {
    Event ev;
    while (p.a->TryTake(FERRY_EV_SEND_DONE, &ev)) {
      EXPECT_EQ(ev.status, FERRY_OK) << ev.message;
      order.push_back(ev.user_data);
    }
    while (p.b->TryTake(FERRY_EV_ARRIVAL, &ev)) {
      EXPECT_TRUE(p.b->t().Discard(p.server, ev.msg_id).ok());
    }
    return order.size() == 3;
  }));
  EXPECT_EQ(order, (std::vector<void*>{&tags[1], &tags[2], &tags[3]}));
  EXPECT_EQ(PatternMismatch(in.data(), in.size(), 7), -1);
  ClosePair(&p);
}

TEST_F(DataPathTest, RingCopyWhenCmaIsDisabled) {
  SetParam("cma", "0");
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  ASSERT_NE(PeerAddress(p.a.get(), p.client).find("data=ring"), std::string::npos)
      << PeerAddress(p.a.get(), p.client);
  // 1 MiB fits the default 2 MiB ring: the send completes unplaced.
  ExpectRingCopied(&p, 1 << 20, 2,
                   "a ring-copied send that fits the ring must complete before place()");
  ClosePair(&p);
}

// Above cma_max the ring carries a segment even though CMA works: both
// processes copy, in a pipeline, instead of one process_vm_readv.
TEST_F(DataPathTest, SegmentsAboveCmaMaxGoThroughTheRing) {
  SetParam("cma_max", "512K");
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  ASSERT_NE(PeerAddress(p.a.get(), p.client).find("data=cma"), std::string::npos)
      << PeerAddress(p.a.get(), p.client);
  // By CMA it could not complete before place(); through the ring it does.
  ExpectRingCopied(&p, 768u << 10, 6, "a segment above cma_max must be ring-copied");
  ClosePair(&p);
}

// cma=auto (the default): a busy-poll context sends large segments through
// the ring, where both spinning processes copy at once (3x process_vm_readv's
// speed at 64 KiB - 1 MiB on the benchmark machine); it still receives by CMA
// from a peer that sends that way, and cma=1 brings CMA back.
TEST_F(DataPathTest, BusyPollContextsRingCopyUnlessCmaIsForced) {
  Pair busy;
  ASSERT_TRUE(MakePair(&busy, FERRY_INIT_BUSY_POLL));
  ASSERT_NE(PeerAddress(busy.a.get(), busy.client).find("data=ring"), std::string::npos)
      << PeerAddress(busy.a.get(), busy.client);
  ExpectRingCopied(&busy, 256u << 10, 3,
                   "a busy-poll sender must ring-copy a 256 KiB segment by default");
  ClosePair(&busy);

  SetParam("cma", "1");
  Pair forced;
  ASSERT_TRUE(MakePair(&forced, FERRY_INIT_BUSY_POLL));
  EXPECT_NE(PeerAddress(forced.a.get(), forced.client).find("data=cma"),
            std::string::npos)
      << "cma=1 must send by CMA in busy-poll mode too: "
      << PeerAddress(forced.a.get(), forced.client);
  ClosePair(&forced);
}

TEST_F(DataPathTest, AnUnknownCmaPolicyIsRefusedWithTheAcceptedValues) {
  SetParam("cma", "sometimes");
  std::string why;
  EXPECT_EQ(Endpoint::Open(0, &why), nullptr);
  EXPECT_NE(why.find("'cma'"), std::string::npos) << why;
  EXPECT_NE(why.find("0, 1 or auto"), std::string::npos) << why;
}

// Request/response traffic drains the ring after every message; the writer
// then goes back to offset 0 (behind a pad record) instead of walking the
// whole ring, so small messages stay on a few pages that both processes keep
// in cache and TLB (the p99 of a round trip: ring.h, kHotBytes). Pages it
// never reaches are never allocated. A ring that holds unread records keeps
// filling in order as before.
TEST_F(DataPathTest, DrainedTrafficStaysOnTheRingsFirstPages) {
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  ferry_shm::SegmentControl* seg = ConnectorSegment();
  ASSERT_NE(seg, nullptr);
  const uint64_t ring_size = seg->header.ring_size;
  const long page = sysconf(_SC_PAGESIZE);
  // Resident pages of the ring from byte `from` on (mincore: no fault-in).
  auto resident_from = [&](uint64_t from) {
    auto* base = reinterpret_cast<unsigned char*>(seg) + ferry_shm::kRingOffset + from;
    const size_t len = ring_size - from;
    std::vector<unsigned char> vec((len + page - 1) / page);
    EXPECT_EQ(mincore(base, len, vec.data()), 0) << std::strerror(errno);
    return std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; });
  };
  auto receive_in_order = [&](int first, int count) {
    for (int i = first; i < first + count; ++i) {
      Event arrival;
      ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                            [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
      const std::string want = "m" + std::to_string(i);
      ASSERT_EQ(std::string(arrival.header.begin(), arrival.header.end()), want);
      ASSERT_EQ(arrival.segments.size(), 1u);
      ASSERT_EQ(arrival.segments[0].length, 64u);
      char got[64];
      std::memcpy(got, arrival.segments[0].inline_data, sizeof got);
      ASSERT_EQ(std::string(got), want);
      ASSERT_TRUE(p.b->t().Discard(p.server, arrival.msg_id).ok());
    }
  };
  auto send = [&](int i) {
    char payload[64] = {};
    const std::string text = "m" + std::to_string(i);
    std::memcpy(payload, text.c_str(), text.size());
    ASSERT_TRUE(p.a->Send(p.client, text, {{payload, sizeof payload}}).ok());
  };

  // 4 000 messages one at a time: 500 KiB of 128-byte records.
  constexpr int kPingPong = 4000;
  for (int i = 0; i < kPingPong; ++i) {
    send(i);
    receive_in_order(i, 1);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(__atomic_load_n(&seg->consumer.tail, __ATOMIC_ACQUIRE), kPingPong * 128u)
      << "the records did not all go through this segment";
  EXPECT_EQ(resident_from(64u << 10), 0)
      << "one-at-a-time traffic reached pages past the ring's first 64 KiB";

  // 1 000 messages sent before any is read: the ring holds them all, in
  // order, past the first pages (no early wrap over unread records).
  constexpr int kBurst = 1000;
  for (int i = kPingPong; i < kPingPong + kBurst; ++i) {
    send(i);
    if (HasFatalFailure()) return;
  }
  receive_in_order(kPingPong, kBurst);
  if (HasFatalFailure()) return;
  EXPECT_GT(resident_from(64u << 10), 0)
      << "a burst of 128 KiB of records must reach further";
  ClosePair(&p);
}

TEST_F(DataPathTest, HugePayloadThroughASmallRing) {
  // A 1 GiB-class tensor with a 1 MiB ring: the ring copy streams it in
  // chunks, never staging the whole payload (256 MiB keeps CI quick).
  SetParam("cma", "0");
  SetParam("ring_size", "1M");
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  const size_t n = 256u << 20;
  std::vector<unsigned char> out(n), in(n);
  FillPattern(out.data(), n, 3);
  // Two segments, so chunks of both follow one message record.
  const size_t first = 3 * (n / 4) + 123;
  ASSERT_TRUE(p.a->Send(p.client, "huge",
                        {{out.data(), first}, {out.data() + first, n - first}}, nullptr)
                  .ok());
  Event arrival;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                        [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
  ASSERT_EQ(arrival.segments.size(), 2u);
  ASSERT_TRUE(p.b->PlaceAll(arrival, {in.data(), in.data() + first}, nullptr).ok());
  Event placed, done;
  ASSERT_TRUE(PumpUntil(
      {p.a.get(), p.b.get()},
      [&] {
        return (placed.type || p.b->TryTake(FERRY_EV_PLACE_DONE, &placed)) &&
               (done.type || p.a->TryTake(FERRY_EV_SEND_DONE, &done));
      },
      60000));
  EXPECT_EQ(placed.status, FERRY_OK) << placed.message;
  EXPECT_EQ(done.status, FERRY_OK) << done.message;
  EXPECT_EQ(PatternMismatch(in.data(), n, 3), -1);
  ClosePair(&p);
}

TEST_F(DataPathTest, CrossProcessEchoOverCmaAndRing) {
  if (YamaRestricts()) {
    GTEST_SKIP() << "kernel.yama.ptrace_scope >= 1: a child may not read its parent's "
                    "memory, so cross-memory attach cannot be shown here";
  }
  for (const char* cma : {"1", "0"}) {
    SCOPED_TRACE(std::string("cma=") + cma);
    SetParam("cma", cma);
    SetParam("cma_max", "0");  // 8 MiB by CMA too, not only by the ring
    auto ep = Endpoint::Open();
    ASSERT_NE(ep, nullptr);
    ferry_listener_t* l = nullptr;
    std::string addr = ep->Listen(&l);
    auto peer = SpawnPeer({"echo", addr},
                          {std::string("FERRY_SHM_CMA=") + cma, "FERRY_SHM_CMA_MAX=0"});
    ASSERT_EQ(WaitLine(peer.get(), {ep.get()}), "connected");
    Event acc;
    ASSERT_TRUE(
        PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_ACCEPTED, &acc); }));
    const std::string want = std::string("data=") + (cma[0] == '1' ? "cma" : "ring");
    EXPECT_NE(PeerAddress(ep.get(), acc.conn).find(want), std::string::npos)
        << PeerAddress(ep.get(), acc.conn);
    const size_t n = 8u << 20;
    std::vector<unsigned char> out(n), in(n);
    FillPattern(out.data(), n, 4);
    ASSERT_TRUE(ep->Send(acc.conn, "echo", {{out.data(), n}}, nullptr).ok());
    Event arrival, placed, done;
    ASSERT_TRUE(PumpUntil({ep.get()}, [&] {
      return (done.type || ep->TryTake(FERRY_EV_SEND_DONE, &done)) &&
             ep->TryTake(FERRY_EV_ARRIVAL, &arrival);
    }));
    ASSERT_TRUE(ep->PlaceAll(arrival, {in.data()}, nullptr).ok());
    ASSERT_TRUE(
        PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_PLACE_DONE, &placed); }));
    EXPECT_EQ(placed.status, FERRY_OK) << placed.message;
    EXPECT_EQ(PatternMismatch(in.data(), n, 4), -1);
    ep->t().Close(acc.conn);
    ep->t().CloseListener(l);
    Event closed;
    ASSERT_TRUE(
        PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_CLOSED, &closed); }));
    EXPECT_EQ(peer->Wait(), 0) << "the echo peer exits once we close";
  }
}

}  // namespace
}  // namespace ferry_shm_test
