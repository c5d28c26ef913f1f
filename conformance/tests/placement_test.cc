// PLACE-*: receive placement. The core answers each arrival with place()
// (destination buffers) or discard(); these tests hold the plugin to where
// bytes land, what a NULL destination means, and which answers it refuses.
#include "harness/conformance_test.h"
#include "testkit/endpoint.h"

namespace ferry::conformance {
namespace {

using testkit::Dest;

class PlacementTest : public ConformanceTest {
 protected:
  // Sends `m` and waits for its arrival, which is left unanswered.
  bool Deliver(ferry_conn_t* from, ferry_conn_t* to, const OutMessage& m,
               std::optional<Event>* arrival) {
    if (Send(from, m) == nullptr) return false;
    return pump().RunUntil(
        [&] {
          if (!*arrival) {
            *arrival = pump().Take([&](const Event& e) {
              return e.type == FERRY_EV_ARRIVAL && e.conn == to;
            });
          }
          return arrival->has_value();
        },
        kOpTimeout, "the arrival of a " + Bytes(m.TotalSize()) + " message");
  }
  // Index of the first segment that did not arrive inline, or -1.
  static int FirstPlaced(const Event& e) {
    for (size_t i = 0; i < e.segments.size(); ++i) {
      if (e.segments[i].inline_data == nullptr && e.segments[i].length > 0) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
};

// "Wrong msg_id, num_dests or a capacity below the segment's length:
// FERRY_INVALID_ARGUMENT, nothing changes."
bool ShapeRefusal(ferry_status_t rc) {
  return rc == FERRY_INVALID_ARGUMENT;
}
// "an unknown msg_id is FERRY_INVALID_ARGUMENT" (discard(), transport.h).
bool DiscardRefusal(ferry_status_t rc) {
  return rc == FERRY_INVALID_ARGUMENT;
}

TEST_P(PlacementTest, SegmentsLandInPlace) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  std::vector<size_t> sizes = {16, 256 * kKiB, 0, 1 * kMiB, 100, 64 * kKiB + 3};
  sizes.resize(std::min<size_t>(sizes.size(), a()->info().max_segments));
  OutMessage* m = NewMessage(1400, 32, sizes);
  std::optional<Event> arrival;
  ASSERT_TRUE(Deliver(link.client, link.server, *m, &arrival));
  const Event& e = *arrival;
  ASSERT_EQ(e.segments.size(), sizes.size());
  // Each placed segment goes to an odd offset inside a larger buffer with
  // canaries before and after: exactly `length` bytes may change.
  constexpr size_t kGuard = 61;
  std::vector<std::vector<unsigned char>> buffers(sizes.size());
  std::vector<ferry_place_dest_t> dests(sizes.size());
  InMessage got;
  got.header.assign(static_cast<const unsigned char*>(e.header),
                    static_cast<const unsigned char*>(e.header) + e.header_len);
  got.segments.resize(sizes.size());
  got.was_inline.resize(sizes.size());
  int inline_count = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(e.segments[i].length, sizes[i]) << "segment " << i;
    buffers[i].resize(sizes[i] + 2 * kGuard);
    FillCanary(buffers[i].data(), buffers[i].size());
    got.was_inline[i] = e.segments[i].inline_data != nullptr;
    if (got.was_inline[i]) {
      ++inline_count;
      got.segments[i].assign(
          static_cast<const unsigned char*>(e.segments[i].inline_data),
          static_cast<const unsigned char*>(e.segments[i].inline_data) + sizes[i]);
      dests[i] = Dest(nullptr, 0);
    } else {
      dests[i] = Dest(buffers[i].data() + kGuard, sizes[i] + kGuard);
    }
  }
  void* cookie = nullptr;
  Status s = Place(link.server, e.msg_id, dests, &cookie);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(WaitOk(
      cookie, "PLACE_DONE for a " + std::to_string(sizes.size()) + "-segment message"));
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (got.was_inline[i]) continue;
    got.segments[i].assign(buffers[i].begin() + kGuard,
                           buffers[i].begin() + kGuard + sizes[i]);
    EXPECT_EQ(CanaryDamage(buffers[i].data(), kGuard), -1)
        << "segment " << i << ": bytes written before the destination";
    EXPECT_EQ(CanaryDamage(buffers[i].data() + kGuard + sizes[i], kGuard), -1)
        << "segment " << i
        << ": bytes written past the segment's length (inside "
           "the destination's capacity)";
  }
  EXPECT_TRUE(SameMessage(*m, got));
  RecordProperty("inline_segments",
                 std::to_string(inline_count) + "/" + std::to_string(sizes.size()));
  // The next message is unaffected.
  Inbox* in = NewInbox(link.server);
  OutMessage* next = NewMessage(1401, 16, {1 * kMiB});
  ASSERT_NE(Send(link.client, *next), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1; }, kOpTimeout,
                              "the message after a multi-segment placement"));
  EXPECT_TRUE(SameMessage(*next, in->messages()[0]));
}

TEST_P(PlacementTest, NullDestinationDropsSegment) {
  if (a()->info().max_segments < 3) {
    FERRY_NOT_RUN("max_segments is " + std::to_string(a()->info().max_segments) +
                  "; the test needs 3");
  }
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox::Options options;
  options.adjust = [](const Event&, std::vector<ferry_place_dest_t>* dests) {
    (*dests)[1].data = nullptr;  // drop the middle segment
    (*dests)[1].capacity = 0;
  };
  Inbox* in = NewInbox(link.server, options);
  OutMessage* m = NewMessage(1500, 16, {1 * kMiB, 512 * kKiB, 1 * kMiB});
  ASSERT_NE(Send(link.client, *m), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->settled() == 1; }, kOpTimeout,
                              "PLACE_DONE with a NULL destination"));
  InMessage& got = in->messages()[0];
  if (got.was_inline.size() > 1 && got.was_inline[1]) {
    FERRY_NOT_RUN(
        "the 512 KiB segment arrived inline; a NULL destination only "
        "applies to placed segments");
  }
  ASSERT_NE(got.place_cookie, nullptr);
  EXPECT_EQ(StatusText(tracker().StatusOf(got.place_cookie)), StatusText(FERRY_OK))
      << tracker().MessageOf(got.place_cookie);
  for (size_t i : {size_t(0), size_t(2)}) {
    EXPECT_EQ(got.segments[i], m->segments[i])
        << "segment " << i << " next to a dropped one";
  }
  // The stream continues intact after the dropped bytes.
  Inbox* after = NewInbox(link.server);
  OutMessage* next = NewMessage(1501, 16, {700 * kKiB, 16, 300 * kKiB});
  ASSERT_NE(Send(link.client, *next), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return after->complete() == 1; }, kOpTimeout,
                              "the message after one with a dropped segment"));
  EXPECT_TRUE(SameMessage(*next, after->messages()[0]));
}

TEST_P(PlacementTest, TooSmallCapacityRefused) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  OutMessage* m = NewMessage(1600, 16, {1 * kMiB});
  std::optional<Event> arrival;
  ASSERT_TRUE(Deliver(link.client, link.server, *m, &arrival));
  const Event& e = *arrival;
  if (FirstPlaced(e) < 0) {
    Discard(link.server, e.msg_id);
    FERRY_NOT_RUN(
        "a 1 MiB segment arrived inline; capacity only applies to placed segments");
  }
  std::vector<unsigned char> buf(1 * kMiB);
  std::vector<ferry_place_dest_t> small = {Dest(buf.data(), buf.size() - 1)};
  void* cookie = nullptr;
  Status s = Place(link.server, e.msg_id, small, &cookie);
  EXPECT_TRUE(ShapeRefusal(s.code()))
      << "place() with capacity length-1 was " << s.ToString()
      << "; it must be refused with INVALID_ARGUMENT";
  EXPECT_FALSE(s.message().empty());
  pump().Churn(10);  // a refused place must produce no event (INV-3)
  if (!s.ok()) {
    // Refusing posted nothing, so the arrival is still there to answer.
    std::vector<ferry_place_dest_t> right = {Dest(buf.data(), buf.size())};
    Status again = Place(link.server, e.msg_id, right, &cookie);
    ASSERT_TRUE(again.ok()) << "after a refused place(), a correct place() of the same "
                               "msg_id failed: "
                            << again.ToString();
    ASSERT_TRUE(WaitOk(cookie, "PLACE_DONE after a corrected place()"));
    EXPECT_EQ(buf, m->segments[0]);
  }
}

TEST_P(PlacementTest, WrongMsgIdRefused) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  OutMessage* m = NewMessage(1700, 16, {1 * kMiB, 16});
  std::optional<Event> arrival;
  ASSERT_TRUE(Deliver(link.client, link.server, *m, &arrival));
  const Event& e = *arrival;
  std::vector<std::vector<unsigned char>> bufs = {std::vector<unsigned char>(1 * kMiB),
                                                  std::vector<unsigned char>(16)};
  std::vector<ferry_place_dest_t> dests;
  for (size_t i = 0; i < 2; ++i) {
    dests.push_back(e.segments[i].inline_data ? Dest(nullptr, 0)
                                              : Dest(bufs[i].data(), bufs[i].size()));
  }
  const uint64_t wrong = e.msg_id + 0x5EED;
  void* cookie = nullptr;
  Status s = Place(link.server, wrong, dests, &cookie);
  EXPECT_TRUE(ShapeRefusal(s.code()))
      << "place() with a msg_id never delivered: " << s.ToString();
  EXPECT_FALSE(s.message().empty());
  Status d = Discard(link.server, wrong);
  EXPECT_TRUE(DiscardRefusal(d.code()))
      << "discard() with a msg_id never delivered: " << d.ToString();
  EXPECT_FALSE(d.message().empty());
  std::vector<ferry_place_dest_t> three = dests;
  three.push_back(Dest(nullptr, 0));
  Status n = Place(link.server, e.msg_id, three, &cookie);
  EXPECT_TRUE(ShapeRefusal(n.code()))
      << "place() with 3 destinations for 2 segments: " << n.ToString();
  EXPECT_FALSE(n.message().empty());
  pump().Churn(10);

  // The right answer still works, once.
  void* good = nullptr;
  Status ok = Place(link.server, e.msg_id, dests, &good);
  ASSERT_TRUE(ok.ok()) << "the correct place() after refused ones: " << ok.ToString();
  Status twice = Place(link.server, e.msg_id, dests, &cookie);
  EXPECT_TRUE(ShapeRefusal(twice.code()))
      << "a second place() of the same msg_id: " << twice.ToString();
  EXPECT_FALSE(twice.message().empty());
  Status late = Discard(link.server, e.msg_id);
  EXPECT_TRUE(DiscardRefusal(late.code()))
      << "discard() of an already placed msg_id: " << late.ToString();
  ASSERT_TRUE(WaitOk(good, "PLACE_DONE"));
  if (!e.segments[0].inline_data) {
    EXPECT_EQ(bufs[0], m->segments[0]);
  }
}

TEST_P(PlacementTest, InlineArrivalAnsweredByPlace) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox::Options options;
  options.place_inline = true;
  Inbox* in = NewInbox(link.server, options);
  // A header-only message is always "all inline"; a 16-byte segment is
  // inline on any plugin with max_inline_size >= 16.
  OutMessage* header_only = NewMessage(1800, 16, {});
  OutMessage* small = NewMessage(1801, 16, {16});
  ASSERT_NE(Send(link.client, *header_only), nullptr);
  ASSERT_NE(Send(link.client, *small), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->settled() == 2; }, kOpTimeout,
                              "PLACE_DONE for arrivals answered with place() although "
                              "all their bytes were inline"));
  for (InMessage& got : in->messages()) {
    ASSERT_NE(got.place_cookie, nullptr);
    EXPECT_EQ(StatusText(tracker().StatusOf(got.place_cookie)), StatusText(FERRY_OK))
        << tracker().MessageOf(got.place_cookie);
  }
  for (OutMessage* sent : {header_only, small}) {
    bool found = false;
    for (InMessage& got : in->messages()) {
      if (got.header == sent->header) {
        found = true;
        EXPECT_TRUE(SameMessage(*sent, got));
      }
    }
    EXPECT_TRUE(found);
  }
}

INSTANTIATE_TEST_SUITE_P(Plugins, PlacementTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
