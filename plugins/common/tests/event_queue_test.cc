// EventQueue and HostEvents: how events reach the host's array. What a host
// would notice if this broke: events out of the order they happened in, an
// arrival returned for a connection that broke in the same progress() call
// (its bytes already given back to the network), or events written past the
// host's array or outside their slots.
#include "ferry_plugin/event_queue.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ferry_plugin {
namespace {

struct FakeConn {
  void* user_data = nullptr;
};

using Queue = EventQueue<FakeConn>;

// A host array of `n` slots of `stride` bytes (poisoned, so a field the
// plugin forgot to write shows), and the progress args naming it.
struct HostArray {
  HostArray(uint32_t n, size_t stride) : bytes(n * stride, 0xAB) {
    args.struct_size = sizeof args;
    args.max_events = n;
    args.events = reinterpret_cast<ferry_event_t*>(bytes.data());
    args.event_stride = stride;
  }
  const ferry_event_t& at(uint32_t i) const {
    return *reinterpret_cast<const ferry_event_t*>(bytes.data() + i * args.event_stride);
  }
  std::vector<unsigned char> bytes;  // malloc's alignment suits ferry_event_t
  ferry_progress_args_t args{};
};

uint32_t DeliverAll(Queue& q, HostArray& h, uint32_t first) {
  return q.Deliver(
      &h.args, first,
      [](FakeConn* c, ferry_event_t* ev) {
        ev->conn = reinterpret_cast<ferry_conn_t*>(c);
        ev->conn_user_data = c != nullptr ? c->user_data : nullptr;
      },
      [](FakeConn*, int32_t) {});
}

// What the fabric plugin writes for an arrival it reads off the network:
// a slot from Take, then the message's fields (false when Take refused).
bool WriteArrival(HostEvents* direct, FakeConn* c, uint64_t msg_id) {
  ferry_event_t* ev =
      direct->Take(FERRY_EV_ARRIVAL, reinterpret_cast<ferry_conn_t*>(c), c->user_data);
  if (ev == nullptr) return false;
  ev->msg_id = msg_id;
  ev->header = nullptr;
  ev->header_len = 0;
  ev->segments = nullptr;
  ev->num_segments = 0;
  return true;
}

TEST(HostEvents, QueuedFirstThenDirectThenQueuedLaterInTheOrderTheyHappened) {
  Queue q;
  FakeConn a, b;
  int send_cookie = 0;
  q.Push(FERRY_EV_SEND_DONE, &a, &send_cookie);  // before this progress()
  HostArray h(8, sizeof(ferry_event_t));
  HostEvents direct;
  direct.Open(&h.args, DeliverAll(q, h, 0));
  ASSERT_TRUE(q.Empty());
  ASSERT_TRUE(WriteArrival(&direct, &a, 1));
  WriteArrival(&direct, &b, 2);
  q.Push(FERRY_EV_CONN_BROKEN, &b, nullptr).status = FERRY_PEER_GONE;  // later
  uint32_t n = direct.Close();
  n += DeliverAll(q, h, n);
  ASSERT_EQ(n, 4u);
  EXPECT_EQ(h.at(0).type, FERRY_EV_SEND_DONE);
  EXPECT_EQ(h.at(0).user_data, &send_cookie);
  EXPECT_EQ(h.at(1).type, FERRY_EV_ARRIVAL);
  EXPECT_EQ(h.at(1).msg_id, 1u);
  EXPECT_EQ(h.at(1).struct_size, sizeof(ferry_event_t));
  EXPECT_EQ(h.at(2).msg_id, 2u);
  EXPECT_EQ(h.at(3).type, FERRY_EV_CONN_BROKEN);
  EXPECT_EQ(h.at(3).status, FERRY_PEER_GONE);
  EXPECT_EQ(direct.Take(FERRY_EV_ARRIVAL, nullptr, nullptr), nullptr)
      << "closed outside progress()";
}

TEST(HostEvents, RetractedArrivalIsNeverReturnedAndLaterEventsMoveUp) {
  Queue q;
  FakeConn a, b;
  HostArray h(8, sizeof(ferry_event_t) + 16);  // a host with a larger struct
  HostEvents direct;
  direct.Open(&h.args, 0);
  WriteArrival(&direct, &a, 1);
  WriteArrival(&direct, &b, 2);
  WriteArrival(&direct, &a, 3);
  // Connection a broke later in the same call: its arrivals can no longer
  // be answered, so they must not reach the host.
  direct.Retract([&a](const ferry_event_t& e) {
    return e.type == FERRY_EV_ARRIVAL && e.conn == reinterpret_cast<ferry_conn_t*>(&a);
  });
  WriteArrival(&direct, &b, 4);
  const uint32_t n = direct.Close();
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(h.at(0).msg_id, 2u);
  EXPECT_EQ(h.at(1).msg_id, 4u);
}

TEST(HostEvents, RetractNeverTouchesEventsDeliveredFromTheQueue) {
  Queue q;
  FakeConn a;
  q.Push(FERRY_EV_ARRIVAL, &a, nullptr).msg_id = 7;
  HostArray h(4, sizeof(ferry_event_t));
  HostEvents direct;
  direct.Open(&h.args, DeliverAll(q, h, 0));
  WriteArrival(&direct, &a, 8);
  direct.Retract([](const ferry_event_t&) { return true; });
  ASSERT_EQ(direct.Close(), 1u);
  EXPECT_EQ(h.at(0).msg_id, 7u);
}

TEST(HostEvents, FullArrayRefusesSoTheCallerQueues) {
  HostArray h(2, sizeof(ferry_event_t));
  HostEvents direct;
  direct.Open(&h.args, 1);
  EXPECT_NE(direct.Take(FERRY_EV_ARRIVAL, nullptr, nullptr), nullptr);
  EXPECT_EQ(direct.Take(FERRY_EV_ARRIVAL, nullptr, nullptr), nullptr);
  EXPECT_EQ(direct.Close(), 2u);
  HostEvents none;
  none.Open(&h.args, 2);  // the queue filled it already
  EXPECT_EQ(none.Take(FERRY_EV_ARRIVAL, nullptr, nullptr), nullptr);
  EXPECT_EQ(none.Close(), 2u);
}

TEST(HostEvents, MisalignedHostSlotsStayWithTheQueuesCopy) {
  // A stride that is not a multiple of ferry_event_t's alignment: an event
  // cannot be written there as a struct, so direct writes are refused and
  // the queue's Deliver builds each event aside and copies it in.
  HostArray odd(4, sizeof(ferry_event_t) + 4);
  HostEvents direct;
  direct.Open(&odd.args, 0);
  EXPECT_EQ(direct.Take(FERRY_EV_ARRIVAL, nullptr, nullptr), nullptr);

  Queue q;
  FakeConn a;
  q.Push(FERRY_EV_ARRIVAL, &a, nullptr).msg_id = 1;
  q.Push(FERRY_EV_ARRIVAL, &a, nullptr).msg_id = 2;
  ASSERT_EQ(DeliverAll(q, odd, 0), 2u);
  ferry_event_t second;
  std::memcpy(&second, odd.bytes.data() + odd.args.event_stride, sizeof second);
  EXPECT_EQ(second.struct_size, sizeof(ferry_event_t));
  EXPECT_EQ(second.msg_id, 2u);
  EXPECT_EQ(odd.bytes[odd.args.event_stride - 1], 0xAB)
      << "the first event was written past its struct";
}

TEST(EventQueue, DeliverFromASlotLeavesTheSlotsBeforeItAndStopsAtTheEnd) {
  Queue q;
  FakeConn a;
  for (uint64_t i = 1; i <= 3; ++i) q.Push(FERRY_EV_ARRIVAL, &a, nullptr).msg_id = i;
  HostArray h(3, sizeof(ferry_event_t));
  std::vector<unsigned char> before(h.bytes.begin(),
                                    h.bytes.begin() + sizeof(ferry_event_t));
  ASSERT_EQ(DeliverAll(q, h, 1), 2u);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), h.bytes.begin()));
  EXPECT_EQ(h.at(1).msg_id, 1u);
  EXPECT_EQ(h.at(2).msg_id, 2u);
  EXPECT_FALSE(q.Empty()) << "the third waits for the next progress()";
  EXPECT_EQ(DeliverAll(q, h, 3), 0u);
  ASSERT_EQ(DeliverAll(q, h, 0), 1u);
  EXPECT_EQ(h.at(0).msg_id, 3u);
}

}  // namespace
}  // namespace ferry_plugin
