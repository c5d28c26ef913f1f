// EDGE-*: the corners of the contract where a careful plugin author reading
// transport.h could otherwise pick either of two behaviours. Each test holds
// a plugin to the one behaviour the header's "Edge cases" settle (and
// docs/writing-a-plugin.md lists): NULL for empty parts, exact segment
// limits, progress() with no room, a connect that failed, a listen address
// in use, close() twice, close() with a placement in flight, fini() with
// everything open, and contexts driven from different threads.
#include "harness/conformance_test.h"
#include "testkit/endpoint.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

namespace ferry::conformance {
namespace {

using testkit::Dest;

class EdgeTest : public ConformanceTest {
 protected:
  const ferry_transport_vtable_t* vt() const { return plugin()->vtable(); }

  // send() straight through the vtable (the wrapper must not tidy the
  // arguments up), with the tracker's bookkeeping.
  Status RawSend(ferry_conn_t* conn, ferry_send_args_t args, void** cookie) {
    *cookie = tracker().Begin(OpKind::kSend, conn);
    args.user_data = *cookie;
    char buf[512] = {0};
    ferry_error_buf_t err{FERRY_ERROR_BUF_STRUCT_SIZE, 0, buf, sizeof buf};
    auto start = Clock::now();
    ferry_status_t rc = vt()->send(conn, &args, &err);
    ExpectPrompt(start, "send()");
    rc == FERRY_OK ? tracker().Posted(*cookie) : tracker().Refused(*cookie);
    return Status(rc, buf);
  }
  // The next arrival on `conn`, left unanswered.
  std::optional<Event> NextArrival(ferry_conn_t* conn, const std::string& what) {
    std::optional<Event> arrival;
    pump().RunUntil(
        [&] {
          arrival = pump().Take([&](const Event& e) {
            return e.type == FERRY_EV_ARRIVAL && e.conn == conn;
          });
          return arrival.has_value();
        },
        kOpTimeout, what);
    return arrival;
  }
};

// Rule: NULL is allowed wherever its length or count is 0 (header, the
// segment array, a segment's data, place()'s destination array and a
// zero-length segment's destination).
TEST_P(EdgeTest, EmptyPartsMayBeNull) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));

  // The empty message: no header, no segments, both pointers NULL.
  ferry_send_args_t empty{};
  empty.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
  empty.segment_stride = sizeof(ferry_segment_t);
  void* c1 = nullptr;
  Status s = RawSend(link.client, empty, &c1);
  ASSERT_TRUE(s.ok()) << "send() of an empty message (header NULL, header_len 0, "
                         "segments NULL, num_segments 0): "
                      << s.ToString();
  std::optional<Event> e = NextArrival(link.server, "the empty message");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->header_len, 0u);
  EXPECT_EQ(e->segments.size(), 0u);
  // Answered by place() with no destinations at all (dests NULL).
  ferry_place_args_t none{};
  none.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  none.msg_id = e->msg_id;
  none.dest_stride = sizeof(ferry_place_dest_t);
  void* p1 = tracker().Begin(OpKind::kPlace, link.server);
  none.user_data = p1;
  char buf[256] = {0};
  ferry_error_buf_t err{FERRY_ERROR_BUF_STRUCT_SIZE, 0, buf, sizeof buf};
  ferry_status_t rc = vt()->place(link.server, &none, &err);
  if (rc == FERRY_OK) {
    tracker().Posted(p1);
    pump().NoteAnswered(link.server, e->msg_id);
  } else {
    tracker().Refused(p1);
  }
  ASSERT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "place() with num_dests 0 and dests NULL for an arrival of 0 segments: " << buf;
  ASSERT_TRUE(WaitOk(p1, "PLACE_DONE for the empty message"));
  ASSERT_TRUE(WaitOk(c1, "SEND_DONE for the empty message"));

  // A zero-length segment whose data is NULL, between two real ones; its
  // destination is NULL too.
  const bool three = a()->info().max_segments >= 3;
  static const unsigned char small[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  std::vector<unsigned char> big(1 * kMiB);
  FillPattern(big.data(), big.size(), 77);
  std::vector<ferry_segment_t> segs;
  auto seg = [](const void* data, uint64_t length) {
    ferry_segment_t g{};
    g.struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    g.data = data;
    g.length = length;
    g.device = {FERRY_DEVICE_CPU, 0};
    return g;
  };
  if (three) segs.push_back(seg(small, sizeof small));
  segs.push_back(seg(nullptr, 0));
  if (three) segs.push_back(seg(big.data(), big.size()));
  ferry_send_args_t args{};
  args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
  args.num_segments = static_cast<uint32_t>(segs.size());
  args.segments = segs.data();
  args.segment_stride = sizeof(ferry_segment_t);
  void* c2 = nullptr;
  s = RawSend(link.client, args, &c2);
  ASSERT_TRUE(s.ok()) << "send() with a zero-length segment whose data is NULL: "
                      << s.ToString();
  e = NextArrival(link.server, "the message with a NULL zero-length segment");
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(e->segments.size(), segs.size());
  const size_t zero = three ? 1 : 0;
  EXPECT_EQ(e->segments[zero].length, 0u);
  std::vector<unsigned char> got_small(sizeof small), got_big(big.size());
  std::vector<ferry_place_dest_t> dests(segs.size(), Dest(nullptr, 0));
  if (three) {
    if (e->segments[0].inline_data != nullptr) {
      std::memcpy(got_small.data(), e->segments[0].inline_data, sizeof small);
    } else {
      dests[0] = Dest(got_small.data(), got_small.size());
    }
    if (e->segments[2].inline_data != nullptr) {
      std::memcpy(got_big.data(), e->segments[2].inline_data, big.size());
    } else {
      dests[2] = Dest(got_big.data(), got_big.size());
    }
  }
  void* p2 = nullptr;
  s = Place(link.server, e->msg_id, dests, &p2);
  ASSERT_TRUE(s.ok()) << "place() with a NULL destination (capacity 0) for the "
                         "zero-length segment: "
                      << s.ToString();
  ASSERT_TRUE(WaitOk(p2, "PLACE_DONE for the message with a zero-length segment"));
  if (three) {
    EXPECT_EQ(0, std::memcmp(got_small.data(), small, sizeof small));
    EXPECT_EQ(got_big, big) << "the segment after the zero-length one";
  }
  ASSERT_TRUE(WaitOk(c2, "SEND_DONE for the message with a zero-length segment"));
}

// Rule: exactly max_segments segments is a valid message; one more is
// RESOURCE_EXHAUSTED, decided from num_segments before any descriptor's
// data is read; a segment longer than max_inline_size never arrives inline.
TEST_P(EdgeTest, SegmentLimitsAreExact) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  const ferry_context_info_t& info = a()->info();
  const uint32_t max = info.max_segments;
  // At most 256 segments travel (a plugin may allow thousands); the
  // refusal below is tested at the plugin's real limit.
  const uint32_t n = std::min<uint32_t>(max, 256);
  const size_t cycle[] = {0, 1, 64, 4097, 20000};
  std::vector<size_t> sizes;
  uint64_t total = 16;
  for (uint32_t i = 0; i < n; ++i) {
    sizes.push_back(cycle[i % 5]);
    total += sizes.back();
  }
  if (total > info.max_message_size) {
    FERRY_NOT_RUN("max_message_size " + Bytes(info.max_message_size) + " is below the " +
                  Bytes(total) + " the test sends");
  }
  Inbox* in = NewInbox(link.server);
  OutMessage* m = NewMessage(5200, 16, sizes);
  ASSERT_NE(Send(link.client, *m), nullptr)
      << "a message of exactly " << n << " segments (max_segments " << max << ")";
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1; }, kOpTimeout,
                              "a message of " + std::to_string(n) + " segments"));
  EXPECT_TRUE(SameMessage(*m, in->messages()[0]));

  if (max < (1u << 16)) {
    // max + 1 descriptors over one 16-byte buffer that faults past its end:
    // each claims 1 byte, so nothing faults unless a length is misread.
    static GuardedBuffer bytes(16);
    std::vector<ferry_segment_t> segs(max + 1u);
    for (ferry_segment_t& g : segs) {
      g.struct_size = FERRY_SEGMENT_STRUCT_SIZE;
      g.data = bytes.data();
      g.length = 1;
      g.device = {FERRY_DEVICE_CPU, 0};
    }
    ferry_send_args_t args{};
    args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
    args.num_segments = max + 1u;
    args.segments = segs.data();
    args.segment_stride = sizeof(ferry_segment_t);
    void* c = nullptr;
    Status s = RawSend(link.client, args, &c);
    EXPECT_EQ(StatusText(s.code()), StatusText(FERRY_RESOURCE_EXHAUSTED))
        << "send() of max_segments + 1 = " << max + 1u << " segments: " << s.ToString();
    EXPECT_FALSE(s.message().empty());
  }

  // Just over the inline bound: never inline.
  const uint64_t over = info.max_inline_size + 1;
  if (over <= 64 * kMiB && over + 16 <= info.max_message_size) {
    OutMessage* big = NewMessage(5201, 16, {static_cast<size_t>(over)});
    ASSERT_NE(Send(link.client, *big), nullptr);
    ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 2; }, kOpTimeout,
                                "a segment of max_inline_size + 1 bytes"));
    EXPECT_TRUE(SameMessage(*big, in->messages()[1]));
    EXPECT_FALSE(in->messages()[1].was_inline[0])
        << "a segment of max_inline_size + 1 = " << over
        << " bytes arrived inline: max_inline_size is the bound the host sizes its "
           "copies by";
  }
  // The connection is unaffected by the refusal.
  OutMessage* after = NewMessage(5202, 16, {100});
  ASSERT_NE(Send(link.client, *after), nullptr);
  const size_t want = in->arrived() + 1;
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == want; }, kOpTimeout,
                              "a message after the refused one"));
  EXPECT_TRUE(SameMessage(*after, in->messages().back()));
}

// Rule: progress() with max_events 0 (and events NULL) makes progress,
// writes no event, sets num_events to 0, and loses nothing: what is ready is
// returned by a later call.
TEST_P(EdgeTest, ProgressWithNoRoomLosesNothing) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  OutMessage* m = NewMessage(5300, 16, {64 * kKiB});
  void* c = Send(link.client, *m);
  ASSERT_NE(c, nullptr);
  std::vector<Transport*> contexts = {a()};
  if (b() != a()) contexts.push_back(b());
  for (int round = 0; round < 200; ++round) {
    for (Transport* t : contexts) {
      ferry_progress_args_t args{};
      args.struct_size = FERRY_PROGRESS_ARGS_STRUCT_SIZE;
      args.max_events = 0;
      args.events = nullptr;
      args.event_stride = sizeof(ferry_event_t);
      args.num_events = 77;
      ferry_status_t rc = vt()->progress(t->context(), &args);
      ASSERT_EQ(StatusText(rc), StatusText(FERRY_OK))
          << "progress() with max_events 0 and events NULL";
      ASSERT_EQ(args.num_events, 0u)
          << "progress() with max_events 0 must set num_events "
             "to 0";
    }
  }
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1 && tracker().Done(c); },
                              kOpTimeout,
                              "the arrival and SEND_DONE after 200 progress() calls "
                              "with no room"));
  EXPECT_TRUE(SameMessage(*m, in->messages()[0]));
  EXPECT_EQ(StatusText(tracker().StatusOf(c)), StatusText(FERRY_OK));
}

// Rule: a connect() whose address parses returns OK even when the plugin
// already knows nothing listens there; CONNECTED then fails (UNAVAILABLE).
// Such a connection never gets CONN_BROKEN, refuses send() with
// FAILED_PRECONDITION (never UNAVAILABLE: retrying cannot help), and still
// needs close(). An address that cannot name a listener ("") is refused
// by connect() itself with INVALID_ARGUMENT.
TEST_P(EdgeTest, FailedConnectStaysFailed) {
  void* ec = nullptr;
  Status empty;
  ferry_conn_t* to_empty = StartConnect(b(), "", &ec, &empty);
  if (to_empty != nullptr) {
    ADD_FAILURE() << "connect(\"\") was accepted; an empty address names no listener "
                     "and must be refused with INVALID_ARGUMENT";
    CloseConn(to_empty);
  } else {
    EXPECT_EQ(StatusText(empty.code()), StatusText(FERRY_INVALID_ARGUMENT))
        << "connect(\"\"): " << empty.ToString();
    EXPECT_FALSE(empty.message().empty());
  }

  std::string address;
  ferry_listener_t* listener = Listen(a(), &address);
  ASSERT_NE(listener, nullptr);
  CloseListener(a(), listener);
  void* cc = nullptr;
  Status refused;
  ferry_conn_t* conn = StartConnect(b(), address, &cc, &refused);
  ASSERT_NE(conn, nullptr) << "connect() to the well-formed address of a closed listener "
                              "was refused at once ("
                           << refused.ToString()
                           << "): report it with CONNECTED (UNAVAILABLE), as for an "
                              "address that refuses later";
  ASSERT_TRUE(WaitDone(cc, "CONNECTED for a connect to a closed listener"));
  if (tracker().StatusOf(cc) == FERRY_OK) {
    CloseConn(conn);
    if (!a()->HasCap(FERRY_CAP_DETECTS_PEER_DEATH)) {
      FERRY_NOT_RUN(
          "connect to a closed address reported OK and the plugin does not claim "
          "FERRY_CAP_DETECTS_PEER_DEATH (connectionless transport)");
    }
    GTEST_FAIL() << "connect() to the address of a closed listener completed OK";
  }
  EXPECT_EQ(StatusText(tracker().StatusOf(cc)), StatusText(FERRY_UNAVAILABLE))
      << tracker().MessageOf(cc);
  pump().Churn(20);
  EXPECT_FALSE(pump().IsBroken(conn))
      << "a connection whose CONNECTED failed must not also get CONN_BROKEN";
  OutMessage* m = NewMessage(5400, 8, {8});
  void* sc = nullptr;
  Status s = TrySend(conn, *m, &sc);
  EXPECT_EQ(StatusText(s.code()), StatusText(FERRY_FAILED_PRECONDITION))
      << "send() on a connection whose connect failed: " << s.ToString();
  EXPECT_FALSE(s.message().empty());
  CloseConn(conn);
  EXPECT_TRUE(WaitClosed(conn));
}

// Rule: listen() never takes over a live listener's address. Where the
// caller chooses the address, one in use is ALREADY_EXISTS, at once, with a
// message; a plugin whose listener addresses are assigned rather than chosen
// (fabric's are its endpoint's) may ignore the request, and then listens at
// an address of its own. Either way the live listener is untouched.
TEST_P(EdgeTest, ListenAddressInUse) {
  std::string address;
  ferry_listener_t* live = Listen(a(), &address);
  ASSERT_NE(live, nullptr);
  ferry_listen_args_t args{};
  args.struct_size = FERRY_LISTEN_ARGS_STRUCT_SIZE;
  args.address = address.c_str();
  ferry_listener_t* second = nullptr;
  char buf[256] = {0};
  ferry_error_buf_t err{FERRY_ERROR_BUF_STRUCT_SIZE, 0, buf, sizeof buf};
  auto start = Clock::now();
  ferry_status_t rc = vt()->listen(b()->context(), &args, &second, &err);
  ExpectPrompt(start, "listen() on an address in use");
  if (rc == FERRY_OK) {
    char other[512] = {0};
    ferry_status_t ac = vt()->listener_address(second, other, sizeof other);
    vt()->close_listener(second);
    ASSERT_EQ(ac, FERRY_OK);
    EXPECT_NE(std::string(other), address)
        << "listen(\"" << address
        << "\") succeeded while a listener is open there, at the same address: it "
           "must answer ALREADY_EXISTS (or, where addresses are assigned, listen "
           "elsewhere)";
  } else {
    EXPECT_EQ(StatusText(rc), StatusText(FERRY_ALREADY_EXISTS))
        << "listen(\"" << address << "\") while a listener is open there: " << buf;
    EXPECT_NE(std::string(buf), "") << "the refusal must say why";
  }
  // The first listener still accepts.
  void* cc = nullptr;
  ferry_conn_t* conn = StartConnect(b(), address, &cc);
  ASSERT_NE(conn, nullptr);
  ferry_conn_t* accepted = nullptr;
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        if (accepted == nullptr) accepted = TakeAccepted(live);
        return accepted != nullptr && tracker().Done(cc);
      },
      kOpTimeout, "CONNECTED and ACCEPTED on the listener whose address was reused"));
  EXPECT_EQ(StatusText(tracker().StatusOf(cc)), StatusText(FERRY_OK))
      << tracker().MessageOf(cc);
}

// Rule: a second close() before CLOSED is a no-op: one CLOSED, nothing
// completed twice.
TEST_P(EdgeTest, CloseTwiceIsNoOp) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  OutMessage* m = NewMessage(5500, 16, {4 * kMiB});
  ASSERT_NE(Send(link.client, *m), nullptr);
  void* cc = nullptr;
  ferry_conn_t* connecting = StartConnect(b(), link.address, &cc);
  ASSERT_NE(connecting, nullptr);
  for (ferry_conn_t* conn : {link.client, connecting}) {
    CloseConn(conn);
    auto start = Clock::now();
    vt()->close(conn);  // the second close(), before any progress()
    ExpectPrompt(start, "a second close()");
  }
  ASSERT_TRUE(WaitClosed(link.client));
  ASSERT_TRUE(WaitClosed(connecting));
  // A second CLOSED (or anything else) for either fails INV-5 here.
  pump().Churn(20);
}

// Rule: close() with a placement in flight completes it before CLOSED:
// PLACE_DONE OK (every byte in place) or CANCELLED; after CLOSED the plugin
// writes nothing into the destination. After close(), place() and discard()
// are refused.
TEST_P(EdgeTest, CloseWithPlacementInFlight) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  OutMessage* m = NewMessage(5600, 16, {16 * kMiB});
  ASSERT_NE(Send(link.client, *m), nullptr);
  std::optional<Event> e = NextArrival(link.server, "a 16 MiB arrival");
  ASSERT_TRUE(e.has_value());
  if (e->segments.size() != 1 || e->segments[0].inline_data != nullptr) {
    Discard(link.server, e->msg_id);
    FERRY_NOT_RUN("a 16 MiB segment arrived inline: nothing to place");
  }
  std::vector<unsigned char> buf(16 * kMiB + 64);
  FillCanary(buf.data(), buf.size());
  void* pc = nullptr;
  Status s = Place(link.server, e->msg_id, {Dest(buf.data(), 16 * kMiB)}, &pc);
  ASSERT_TRUE(s.ok()) << s.ToString();
  CloseConn(link.server);  // at once: no progress() between place() and close()
  // close() released the arrival: answering it again is refused as a send()
  // would be, and changes nothing (a refused place() produces no event,
  // INV-3).
  void* again = nullptr;
  Status late = Place(link.server, e->msg_id, {Dest(buf.data(), 16 * kMiB)}, &again);
  EXPECT_EQ(StatusText(late.code()), StatusText(FERRY_FAILED_PRECONDITION))
      << "place() after close(): " << late.ToString();
  Status dropped = Discard(link.server, e->msg_id);
  EXPECT_EQ(StatusText(dropped.code()), StatusText(FERRY_FAILED_PRECONDITION))
      << "discard() after close(): " << dropped.ToString();
  EXPECT_FALSE(dropped.message().empty());
  ASSERT_TRUE(WaitClosed(link.server));
  ASSERT_TRUE(tracker().Done(pc)) << "CLOSED came before PLACE_DONE";
  const ferry_status_t st = tracker().StatusOf(pc);
  EXPECT_TRUE(st == FERRY_OK || st == FERRY_CANCELLED)
      << "a placement in flight at close() ended with " << StatusText(st) << ": "
      << tracker().MessageOf(pc);
  if (st == FERRY_OK) {
    EXPECT_EQ(0, std::memcmp(buf.data(), m->segments[0].data(), 16 * kMiB))
        << "PLACE_DONE OK but the bytes are not all there";
  }
  // Nothing lands after CLOSED: snapshot, progress on, compare.
  std::vector<unsigned char> snapshot = buf;
  pump().Churn(50);
  EXPECT_EQ(CanaryDamage(buf.data() + 16 * kMiB, 64), -1)
      << "bytes written past the destination's capacity";
  EXPECT_TRUE(buf == snapshot) << "the destination changed after CLOSED";
}

// Rule: fini() may be called with listeners open, connections open or
// closing, sends and placements in flight and arrivals unanswered (the core
// does so when a shutdown's grace period ends). It returns at once,
// releases all of it (no fd survives) and returns no event. The peers are
// processes, as a worker's are: one that stopped reading (our sends stay in
// flight) and one sending 64 MiB + 8 x 1 MiB (a placement in flight, an
// arrival unanswered).
TEST_P(EdgeTest, FiniWithEverythingOpen) {
  if (!multi_context()) {
    FERRY_NOT_RUN(
        "the plugin does not declare FERRY_FEATURE_MULTI_CONTEXT (the test "
        "opens a context of its own to finish)");
  }
  // A fresh context, so that every fd opened from here on (but the peers'
  // control channels) is its own.
  const std::set<int> before = OpenFds();
  Transport* c = OpenContext(0, "edge-fini");
  ASSERT_NE(c, nullptr);
  std::string address;
  ferry_listener_t* listener = Listen(c, &address);
  ASSERT_NE(listener, nullptr);
  auto accept_peer = [&](const std::string& mode, PeerProcess** peer) -> ferry_conn_t* {
    *peer = SpawnPeer(mode, address);
    if (*peer == nullptr) return nullptr;
    ferry_conn_t* conn = nullptr;
    if (!pump().RunUntil(
            [&] { return (conn = conn ? conn : TakeAccepted(listener)) != nullptr; },
            kOpTimeout, "ACCEPTED from a " + mode + " peer process")) {
      return nullptr;
    }
    return WaitPeerSays(*peer, "ready") ? conn : nullptr;
  };
  PeerProcess* stalled = nullptr;
  PeerProcess* sender = nullptr;
  ferry_conn_t* to_stalled = accept_peer("stall", &stalled);
  ASSERT_NE(to_stalled, nullptr);
  ferry_conn_t* from_sender = accept_peer("send-big", &sender);
  ASSERT_NE(from_sender, nullptr);
  // Sends in flight to a peer that never reads.
  for (int i = 0; i < 4; ++i) {
    OutMessage* m = NewMessage(5700 + i, 16, {16 * kMiB});
    void* sc = nullptr;
    (void)TrySend(to_stalled, *m, &sc);
  }
  // The 64 MiB arrival placed (in flight), the next left unanswered.
  std::optional<Event> first = NextArrival(from_sender, "the 64 MiB arrival");
  ASSERT_TRUE(first.has_value());
  std::vector<unsigned char> dest(64 * kMiB);
  std::vector<ferry_place_dest_t> dests;
  for (const SegmentView& seg : first->segments) {
    dests.push_back(seg.inline_data != nullptr ? Dest(nullptr, 0)
                                               : Dest(dest.data(), dest.size()));
  }
  void* pc = nullptr;
  ASSERT_TRUE(Place(from_sender, first->msg_id, dests, &pc).ok());
  pump().RunQuietlyUntil(
      [&] {
        return pump().HasQueued([&](const Event& e) {
          return e.type == FERRY_EV_ARRIVAL && e.conn == from_sender;
        });
      },
      milliseconds(2000));
  // A connection closing, and a connect not yet completed (both to c's own
  // listener).
  void* k1 = nullptr;
  ferry_conn_t* closing = StartConnect(c, address, &k1);
  ASSERT_NE(closing, nullptr);
  CloseConn(closing);
  void* k2 = nullptr;
  ASSERT_NE(StartConnect(c, address, &k2), nullptr);

  auto start = Clock::now();
  AbandonContext(c);  // fini()
  ExpectPrompt(start, "fini() with everything open");

  std::set<int> leaked;
  for (int fd : OpenFds()) {
    if (before.count(fd) == 0 && fd != stalled->channel_fd() &&
        fd != sender->channel_fd()) {
      leaked.insert(fd);
    }
  }
  std::string list;
  for (int fd : leaked) {
    char path[64], target[256] = {0};
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    list += "\n    fd " + std::to_string(fd) + " -> " + (n > 0 ? target : "?");
  }
  EXPECT_TRUE(leaked.empty()) << leaked.size()
                              << " fd(s) the context opened are still open after its "
                                 "fini() with everything open:"
                              << list;
}

// Rule: calls on different contexts may run on different threads at the same
// time, also without FERRY_CAP_THREAD_SAFE (which is about one context):
// nothing a context keeps may be shared unprotected with another.
TEST_P(EdgeTest, ContextsOnSeparateThreads) {
  if (!multi_context()) {
    FERRY_NOT_RUN("the plugin does not declare FERRY_FEATURE_MULTI_CONTEXT");
  }
  constexpr int kThreads = 2;
  constexpr int kMessages = 300;
  const bool ordered = a()->HasCap(FERRY_CAP_ORDERED);
  std::atomic<int> finished{0};
  auto run = [&](int id) {
    testkit::Endpoint::Options options;
    options.instance = "edge-thread-" + std::to_string(id);
    testkit::Endpoint server(plugin(), options), client(plugin(), options);
    if (!server.ok() || !client.ok()) {
      ADD_FAILURE() << "thread " << id << ": init: "
                    << (server.ok() ? client.status() : server.status()).ToString();
      return;
    }
    testkit::Link link;
    if (!testkit::Connect(&client, &server, "", &link)) return;
    int sent = 0, done = 0, got = 0;
    auto drain = [&] {
      testkit::Event e;
      while (server.TryTake(FERRY_EV_ARRIVAL, &e, link.server)) {
        int seq = -1, from = -1;
        if (e.header.size() == 2 * sizeof(int)) {
          std::memcpy(&from, e.header.data(), sizeof from);
          std::memcpy(&seq, e.header.data() + sizeof from, sizeof seq);
        }
        EXPECT_EQ(from, id) << "thread " << id
                            << "'s context received a message of another context";
        if (ordered) {
          EXPECT_EQ(seq, got) << "thread " << id << ": out of order";
        }
        ++got;
        Status d = server.t().Discard(link.server, e.msg_id);
        EXPECT_TRUE(d.ok()) << d.ToString();
      }
      while (client.TryTake(FERRY_EV_SEND_DONE, &e, link.client)) {
        EXPECT_EQ(e.status, FERRY_OK) << e.message;
        ++done;
      }
      while (sent < kMessages && sent - done < 32) {
        std::string header(2 * sizeof(int), '\0');
        std::memcpy(header.data(), &id, sizeof id);
        std::memcpy(header.data() + sizeof id, &sent, sizeof sent);
        ferry_send_args_t args = testkit::SendArgs(header, {}, nullptr);
        Status s = client.t().Send(link.client, args);
        if (s.code() == FERRY_UNAVAILABLE) break;
        EXPECT_TRUE(s.ok()) << s.ToString();
        if (!s.ok()) return true;
        ++sent;
      }
      return got == kMessages && done == kMessages;
    };
    EXPECT_TRUE(testkit::PumpUntil({&client, &server}, drain, kOpTimeout))
        << "thread " << id << ": " << got << " of " << kMessages << " arrived, " << done
        << " sends completed";
    testkit::CloseLink(&client, &server, link);
    finished.fetch_add(1);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(run, i);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(finished.load(), kThreads);
}

INSTANTIATE_TEST_SUITE_P(Plugins, EdgeTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
