// MSG-*: messages end to end — sizes from 0 B to 64 MiB checked byte for
// byte, the size limits, ordering, many operations in flight, discard,
// sends before CONNECTED, both directions at once, a peer process, and the
// completion contract on its own.
#include "harness/conformance_test.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>

#include <sys/wait.h>

namespace ferry::conformance {
namespace {

class MessagingTest : public ConformanceTest {
 protected:
  uint64_t max_payload(size_t header_len) const {
    const uint64_t max = a()->info().max_message_size;
    return max > header_len ? max - header_len : 0;
  }
  // The received message whose header equals `sent`'s (plugins need not
  // keep order unless they claim FERRY_CAP_ORDERED).
  const InMessage* Find(Inbox* in, const OutMessage& sent) {
    for (const InMessage& m : in->messages()) {
      if (m.header == sent.header) return &m;
    }
    return nullptr;
  }
  void ExpectDelivered(Inbox* in, const std::vector<OutMessage*>& sent) {
    for (size_t i = 0; i < sent.size(); ++i) {
      const InMessage* got = Find(in, *sent[i]);
      ASSERT_NE(got, nullptr) << "message " << i << " (" << Bytes(sent[i]->TotalSize())
                              << ") never arrived";
      EXPECT_TRUE(SameMessage(*sent[i], *got)) << "message " << i;
    }
  }
  // A send whose segment claims `length` bytes over a 16-byte buffer that
  // faults on the 17th: the plugin must refuse before touching the data.
  Status SendHuge(ferry_conn_t* conn, const std::vector<uint64_t>& lengths,
                  size_t header_len, void** cookie, std::string* error) {
    static GuardedBuffer bytes(16);
    std::vector<unsigned char> header(header_len, 0x11);
    std::vector<ferry_segment_t> segs(lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      segs[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
      segs[i].data = bytes.data();
      segs[i].length = lengths[i];
      segs[i].device = {FERRY_DEVICE_CPU, 0};
    }
    ferry_send_args_t args{};
    args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
    args.num_segments = static_cast<uint32_t>(segs.size());
    args.header = header.data();
    args.header_len = header.size();
    args.segments = segs.data();
    args.segment_stride = sizeof(ferry_segment_t);
    *cookie = tracker().Begin(OpKind::kSend, conn);
    args.user_data = *cookie;
    char buf[512] = {0};
    ferry_error_buf_t err{FERRY_ERROR_BUF_STRUCT_SIZE, 0, buf, sizeof buf};
    auto start = Clock::now();
    ferry_status_t rc = plugin()->vtable()->send(conn, &args, &err);
    ExpectPrompt(start, "send() of an oversized message");
    rc == FERRY_OK ? tracker().Posted(*cookie) : tracker().Refused(*cookie);
    *error = buf;
    return Status(rc, buf);
  }
};

// "FERRY_RESOURCE_EXHAUSTED for one over a limit (header, segments, message
// size; checked from the lengths alone, before any data pointer is read)".
bool SizeRefusal(ferry_status_t rc) {
  return rc == FERRY_RESOURCE_EXHAUSTED;
}

TEST_P(MessagingTest, SizesUpTo1MiB) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* at_server = NewInbox(link.server);
  Inbox* at_client = NewInbox(link.client);
  std::vector<OutMessage*> up, down;
  const std::vector<std::vector<size_t>> shapes = {{}, {0}, {1}, {4 * kKiB}, {1 * kMiB}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    uint64_t total = 32;
    for (size_t s : shapes[i]) total += s;
    if (total > a()->info().max_message_size) continue;
    up.push_back(NewMessage(300 + i, 32, shapes[i]));
    down.push_back(NewMessage(400 + i, 32, shapes[i]));
  }
  for (size_t i = 0; i < up.size(); ++i) {
    ASSERT_NE(Send(link.client, *up[i]), nullptr);
    ASSERT_NE(Send(link.server, *down[i]), nullptr);
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        return at_server->complete() == up.size() &&
               at_client->complete() == down.size() && tracker().Pending() == 0;
      },
      kOpTimeout, "messages of 0 B (header only), 0 B, 1 B, 4 KiB and 1 MiB each way"));
  ExpectDelivered(at_server, up);
  ExpectDelivered(at_client, down);
  EXPECT_EQ(at_server->arrived(), up.size()) << "extra arrivals";
}

TEST_P(MessagingTest, LargeMessage64MiB) {
  const uint64_t size = std::min<uint64_t>(64 * kMiB, max_payload(16));
  if (size < 64 * kMiB) {
    RecordProperty("note", "max_message_size is " + Bytes(a()->info().max_message_size) +
                               ": sending " + Bytes(size) + " instead of 64 MiB");
  }
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  OutMessage* m = NewMessage(64, 16, {static_cast<size_t>(size)});
  void* c = Send(link.client, *m);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1 && tracker().Done(c); },
                              milliseconds(30000), "a " + Bytes(size) + " message"));
  EXPECT_EQ(StatusText(tracker().StatusOf(c)), StatusText(FERRY_OK))
      << tracker().MessageOf(c);
  EXPECT_TRUE(SameMessage(*m, in->messages()[0]));
}

TEST_P(MessagingTest, OversizedMessageRefused) {
  const uint64_t max = a()->info().max_message_size;
  if (max >= UINT64_MAX - 1) {
    FERRY_NOT_RUN("max_message_size is UINT64_MAX: the plugin advertises no limit");
  }
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  struct Case {
    const char* what;
    std::vector<uint64_t> lengths;
    size_t header_len;
  };
  std::vector<Case> cases = {
      {"one segment of max_message_size + 1 bytes", {max + 1}, 0},
      {"a 1-byte header plus a segment of max_message_size bytes", {max}, 1},
  };
  if (a()->info().max_segments >= 2) {
    cases.push_back({"two segments that only together exceed the limit",
                     {max / 2 + 1, max / 2 + 1},
                     0});
  }
  for (const Case& c : cases) {
    void* cookie = nullptr;
    std::string error;
    Status s = SendHuge(link.client, c.lengths, c.header_len, &cookie, &error);
    EXPECT_TRUE(SizeRefusal(s.code()))
        << c.what << " (max_message_size " << max << "): expected "
        << "RESOURCE_EXHAUSTED at once, got " << StatusText(s.code())
        << (s.code() == FERRY_UNAVAILABLE ? " — retrying can never succeed, so a host "
                                            "would spin forever"
                                          : "");
    EXPECT_FALSE(error.empty()) << c.what << ": the refusal must fill the error buffer";
  }
  // Nothing was posted: no completion (the tracker checks), no arrival, and
  // the connection still works.
  pump().Churn(20);
  EXPECT_EQ(in->arrived(), 0u) << "a refused send produced an arrival";
  OutMessage* ok = NewMessage(65, 16, {4 * kKiB});
  ASSERT_NE(Send(link.client, *ok), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1; }, kOpTimeout,
                              "a normal message after the refusals"));
  EXPECT_TRUE(SameMessage(*ok, in->messages()[0]));
}

TEST_P(MessagingTest, HeaderSizeLimit) {
  const uint32_t max = a()->info().max_header_size;
  if (max > 64 * kMiB) {
    FERRY_NOT_RUN("max_header_size " + Bytes(max) + " is too large to test");
  }
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  std::vector<OutMessage*> sent;
  std::set<size_t> lengths = {0, 1, 64, max};
  uint64_t seed = 500;
  for (size_t len : lengths) sent.push_back(NewMessage(seed++, len, {16}));
  for (OutMessage* m : sent) ASSERT_NE(Send(link.client, *m), nullptr);
  ASSERT_TRUE(
      pump().RunUntil([&] { return in->complete() == sent.size(); }, kOpTimeout,
                      "messages with headers of 0, 1, 64 and max_header_size bytes"));
  // Headers of equal length differ in content, so Find() matches exactly;
  // the 0-byte header is the only empty one.
  for (OutMessage* m : sent) {
    bool found = false;
    for (const InMessage& got : in->messages()) {
      if (got.header == m->header) {
        found = true;
        EXPECT_TRUE(SameMessage(*m, got));
      }
    }
    EXPECT_TRUE(found) << "the message with a " << m->header.size()
                       << "-byte header never arrived";
  }
  OutMessage* over = NewMessage(seed++, static_cast<size_t>(max) + 1, {16});
  void* cookie = nullptr;
  Status s = TrySend(link.client, *over, &cookie);
  EXPECT_TRUE(SizeRefusal(s.code()))
      << "a header of max_header_size + 1 = " << max + 1
      << " bytes: expected RESOURCE_EXHAUSTED (over a limit), got " << s.ToString();
  EXPECT_FALSE(s.message().empty());
  pump().Churn(20);
  EXPECT_EQ(in->arrived(), sent.size()) << "the refused header produced an arrival";
}

TEST_P(MessagingTest, OrderedDelivery) {
  FERRY_REQUIRE_CAP(a(), FERRY_CAP_ORDERED);
  constexpr uint32_t kCount = 1000;
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  const size_t sizes[] = {0, 16, 1000, 5000, 70000};
  std::vector<OutMessage*> sent;
  for (uint32_t i = 0; i < kCount; ++i) {
    sent.push_back(NewMessage(10000 + i, 8, {sizes[i % 5]}));
    std::memcpy(sent.back()->header.data(), &i, sizeof i);
    ASSERT_NE(Send(link.client, *sent.back()), nullptr) << "message " << i;
  }
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == kCount; },
                              milliseconds(30000), "1000 numbered messages"));
  for (uint32_t i = 0; i < kCount; ++i) {
    uint32_t seq = UINT32_MAX;
    std::memcpy(&seq, in->messages()[i].header.data(), sizeof seq);
    ASSERT_EQ(seq, i) << "arrival " << i << " is message " << seq
                      << " although the plugin claims FERRY_CAP_ORDERED";
    ASSERT_TRUE(SameMessage(*sent[i], in->messages()[i])) << "message " << i;
  }
}

TEST_P(MessagingTest, ManyOperationsInFlight) {
  constexpr uint32_t kCount = 1000;
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  std::vector<OutMessage*> sent;
  for (uint32_t i = 0; i < kCount; ++i) {
    sent.push_back(NewMessage(20000 + i, 8, {4 * kKiB}));
    std::memcpy(sent.back()->header.data(), &i, sizeof i);
  }
  // Post everything before any progress. FERRY_UNAVAILABLE is back-pressure:
  // progress once and post again (the core's rule).
  std::vector<void*> cookies;
  int refusals = 0;
  int posted_before_backpressure = -1;
  const auto deadline = Clock::now() + kOpTimeout;
  for (uint32_t i = 0; i < kCount;) {
    void* c = nullptr;
    Status s = TrySend(link.client, *sent[i], &c);
    if (s.ok()) {
      cookies.push_back(c);
      ++i;
      continue;
    }
    ASSERT_EQ(StatusText(s.code()), StatusText(FERRY_UNAVAILABLE))
        << "send " << i << ": " << s.ToString();
    EXPECT_FALSE(s.message().empty());
    if (posted_before_backpressure < 0) posted_before_backpressure = static_cast<int>(i);
    ++refusals;
    ASSERT_LT(Clock::now(), deadline) << "back-pressure did not clear in 10 s";
    pump().PollOnce();
  }
  RecordProperty(
      "posted_before_backpressure",
      std::to_string(posted_before_backpressure < 0 ? kCount
                                                    : posted_before_backpressure));
  Inbox* in = NewInbox(link.server);
  ASSERT_TRUE(pump().RunUntil(
      [&] { return in->complete() == kCount && tracker().Pending() == 0; },
      milliseconds(30000), "1000 sends and their arrivals"));
  for (void* c : cookies)
    EXPECT_EQ(StatusText(tracker().StatusOf(c)), StatusText(FERRY_OK));
  std::vector<int> seen(kCount, 0);
  for (const InMessage& m : in->messages()) {
    uint32_t seq = UINT32_MAX;
    std::memcpy(&seq, m.header.data(), sizeof seq);
    ASSERT_LT(seq, kCount);
    ++seen[seq];
    EXPECT_TRUE(SameMessage(*sent[seq], m)) << "message " << seq;
  }
  for (uint32_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(seen[i], 1) << "message " << i << " arrived " << seen[i] << " times";
  }
}

TEST_P(MessagingTest, DiscardDropsOneMessage) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  OutMessage* a1 = NewMessage(601, 16, {16});
  OutMessage* big = NewMessage(602, 16, {1 * kMiB, 8});  // dropped
  OutMessage* a2 = NewMessage(603, 16, {1 * kMiB});
  OutMessage* tiny = NewMessage(604, 16, {8});  // dropped
  OutMessage* a3 = NewMessage(605, 16, {100 * kKiB, 16});
  Inbox::Options options;
  options.discard_if = [&](const Event& e) {
    std::vector<unsigned char> h(
        static_cast<const unsigned char*>(e.header),
        static_cast<const unsigned char*>(e.header) + e.header_len);
    return h == big->header || h == tiny->header;
  };
  Inbox* in = NewInbox(link.server, options);
  for (OutMessage* m : {a1, big, a2, tiny, a3}) ASSERT_NE(Send(link.client, *m), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->arrived() == 5 && in->complete() == 3; },
                              kOpTimeout, "five messages, two of them discarded"));
  ExpectDelivered(in, {a1, a2, a3});
  // And the stream goes on intact after a discarded message.
  OutMessage* after = NewMessage(606, 16, {512 * kKiB});
  ASSERT_NE(Send(link.client, *after), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 4; }, kOpTimeout,
                              "a message after the discards"));
  ExpectDelivered(in, {after});
}

TEST_P(MessagingTest, SendsBeforeConnectedAreDelivered) {
  std::string address;
  ferry_listener_t* listener = Listen(a(), &address);
  ASSERT_NE(listener, nullptr);
  void* cc = nullptr;
  ferry_conn_t* conn = StartConnect(b(), address, &cc);
  ASSERT_NE(conn, nullptr);
  // No progress yet: CONNECTED cannot have been returned.
  std::vector<OutMessage*> sent = {NewMessage(701, 16, {4 * kKiB}),
                                   NewMessage(702, 16, {1 * kMiB}),
                                   NewMessage(703, 16, {16})};
  for (OutMessage* m : sent) ASSERT_NE(Send(conn, *m), nullptr);
  ferry_conn_t* accepted = nullptr;
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        if (accepted == nullptr) accepted = TakeAccepted(listener);
        return accepted != nullptr && tracker().Done(cc);
      },
      kOpTimeout, "CONNECTED and ACCEPTED"));
  ASSERT_EQ(StatusText(tracker().StatusOf(cc)), StatusText(FERRY_OK))
      << tracker().MessageOf(cc);
  Inbox* in = NewInbox(accepted);
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 3; }, kOpTimeout,
                              "three messages posted before CONNECTED"));
  ExpectDelivered(in, sent);
  if (a()->HasCap(FERRY_CAP_ORDERED)) {
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(in->messages()[i].header, sent[i]->header)
          << "order lost for sends queued before CONNECTED";
    }
  }
}

TEST_P(MessagingTest, BothDirectionsAtOnce) {
  // Both sides write more than the socket buffers hold before either reads:
  // a transport that blocks (or stops reading) while its writes are stuck
  // deadlocks here.
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* at_server = NewInbox(link.server);
  Inbox* at_client = NewInbox(link.client);
  std::vector<OutMessage*> up, down;
  for (int i = 0; i < 8; ++i) {
    up.push_back(NewMessage(800 + i, 16, {1 * kMiB}));
    down.push_back(NewMessage(900 + i, 16, {1 * kMiB}));
  }
  up.push_back(NewMessage(810, 16, {16 * kMiB}));
  down.push_back(NewMessage(910, 16, {16 * kMiB}));
  for (size_t i = 0; i < up.size(); ++i) {
    void* c = nullptr;
    // Post without progress where the plugin allows; Send() progresses only
    // on back-pressure.
    ASSERT_TRUE(TrySend(link.client, *up[i], &c).ok() ||
                Send(link.client, *up[i]) != nullptr);
    ASSERT_TRUE(TrySend(link.server, *down[i], &c).ok() ||
                Send(link.server, *down[i]) != nullptr);
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        return at_server->complete() == up.size() &&
               at_client->complete() == down.size() && tracker().Pending() == 0;
      },
      milliseconds(30000), "24 MiB each way at once"));
  ExpectDelivered(at_server, up);
  ExpectDelivered(at_client, down);
}

TEST_P(MessagingTest, CrossProcessEcho) {
  std::string address;
  ferry_listener_t* listener = Listen(a(), &address);
  ASSERT_NE(listener, nullptr);
  PeerProcess* peer = SpawnPeer("echo", address);
  ASSERT_NE(peer, nullptr);
  ferry_conn_t* conn = nullptr;
  ASSERT_TRUE(pump().RunUntil(
      [&] { return (conn = conn ? conn : TakeAccepted(listener)) != nullptr; },
      kOpTimeout, "ACCEPTED from the peer process"));
  ASSERT_TRUE(WaitPeerSays(peer, "ready"));
  Inbox* in = NewInbox(conn);
  const std::vector<std::vector<size_t>> shapes = {
      {}, {0}, {16}, {4 * kKiB, 8}, {1 * kMiB}, {100, 200 * kKiB, 3}, {8 * kMiB}};
  std::vector<OutMessage*> sent;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (shapes[i].size() > a()->info().max_segments) continue;
      sent.push_back(NewMessage(1100 + round * 100 + i, 24, shapes[i]));
      ASSERT_NE(Send(conn, *sent.back()), nullptr);
    }
  }
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == sent.size(); },
                              milliseconds(30000),
                              "every message echoed by the peer process"));
  ExpectDelivered(in, sent);
  // The peer closes cleanly when told, and exits 0.
  peer->CloseChannel();
  int status = 0;
  std::string line;
  while (peer->TryReadLine(&line)) {
  }
  bool exited = false;
  pump().RunQuietlyUntil(
      [&] {
        while (peer->TryReadLine(&line)) {
        }
        return exited = peer->ChannelClosed();
      },
      kOpTimeout);
  ASSERT_TRUE(exited) << "the peer did not finish within 10 s of being told to";
  ASSERT_TRUE(peer->WaitExit(kOpTimeout, &status));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "peer process " << PeerProcess::DescribeWaitStatus(status);
}

TEST_P(MessagingTest, HeaderIsCopiedDuringSend) {
  // transport.h: the header is "copied during the call: the caller may
  // reuse it on return". The core encodes every message's header into one
  // buffer it reuses, so a plugin that kept the pointer (to write later,
  // behind back-pressure) would send other messages' bytes. Each header
  // here is scribbled over as soon as send() returns; enough large
  // messages go first that later sends wait behind them.
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  std::vector<OutMessage*> sent;
  std::vector<std::unique_ptr<OutMessage>> posted;
  for (int i = 0; i < 300; ++i) {
    const size_t size = i % 10 == 0 ? 2 * kMiB + 1 : (i % 3 == 0 ? 4 * kKiB : 16);
    sent.push_back(NewMessage(1200 + static_cast<uint64_t>(i), 24, {size}));
    posted.push_back(std::make_unique<OutMessage>(*sent.back()));
    ASSERT_NE(Send(link.client, *posted.back()), nullptr) << "message " << i;
    std::fill(posted.back()->header.begin(), posted.back()->header.end(), 0xEE);
  }
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == sent.size(); }, kOpTimeout,
                              "300 messages whose headers were scribbled after send()"));
  ExpectDelivered(in, sent);
}

TEST_P(MessagingTest, CompletionsExactlyOnceNeverInline) {
  // The contract every test enforces, here on purpose and under stress: one
  // event per progress() call (so completions queue inside the plugin),
  // every kind of operation, refused posts among them, then a long quiet
  // stretch in which no completion may repeat.
  pump().SetMaxEvents(1);
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  std::vector<void*> extra_connects;
  for (int i = 0; i < 3; ++i) {
    void* c = nullptr;
    ASSERT_NE(StartConnect(b(), link.address, &c), nullptr);
    extra_connects.push_back(c);
  }
  Inbox::Options place_everything;
  place_everything.place_inline = true;  // more PLACE_DONEs
  Inbox* at_server = NewInbox(link.server, place_everything);
  Inbox* at_client = NewInbox(link.client);
  const std::vector<std::vector<size_t>> shapes = {{}, {16}, {4 * kKiB}, {300 * kKiB}};
  size_t up = 0, down = 0;
  for (int i = 0; i < 200; ++i) {
    OutMessage* m = NewMessage(1300 + i, 8, shapes[i % shapes.size()]);
    if (i % 2 == 0) {
      ASSERT_NE(Send(link.client, *m), nullptr);
      ++up;
    } else {
      ASSERT_NE(Send(link.server, *m), nullptr);
      ++down;
    }
    if (i % 50 == 0 && a()->info().max_header_size < kMiB) {
      // A refused post among the accepted ones: it must stay silent.
      OutMessage* bad = NewMessage(1299, a()->info().max_header_size + 1, {});
      void* c = nullptr;
      EXPECT_FALSE(TrySend(link.client, *bad, &c).ok());
    }
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        return at_server->complete() == up && at_client->complete() == down &&
               tracker().Pending() == 0;
      },
      milliseconds(30000), "200 messages with one event per progress() call"));
  for (void* c : extra_connects)
    EXPECT_EQ(StatusText(tracker().StatusOf(c)), StatusText(FERRY_OK));
  const uint64_t events = pump().events_seen();
  pump().Churn(200);  // any late duplicate shows up here (INV-1)
  EXPECT_EQ(at_server->arrived(), up);
  EXPECT_EQ(at_client->arrived(), down);
  RecordProperty("events", std::to_string(events));
}

INSTANTIATE_TEST_SUITE_P(Plugins, MessagingTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
