// The doorbell: a receiver that went to sleep (its progress() found nothing,
// spun, and armed) is woken through its wakeup fd by the sender's doorbell,
// with no progress() on its side; and a busy-poll context never arms (its
// wakeup fd stays readable: the host spins).
#include "shm_fixture.h"

#include <poll.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace ferry_shm_test {
namespace {

bool Readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN) != 0;
}

class DoorbellTest : public ShmTest {
 protected:
  // Progresses until both wakeup fds are quiet (both contexts armed).
  bool SettleAsleep(Pair* p) {
    return PumpUntil({p->a.get(), p->b.get()}, [&] {
      return !Readable(p->a->wakeup_fd(), 0) && !Readable(p->b->wakeup_fd(), 0);
    });
  }
};

TEST_F(DoorbellTest, SleepingReceiverWakesOnAMessage) {
  SetParam("spin_us", "0");
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  ASSERT_TRUE(SettleAsleep(&p)) << "the wakeup fds never went quiet";
  std::atomic<bool> asleep{false};
  std::atomic<bool> woke{false};
  Event arrival;
  // The receiver blocks in poll() on its wakeup fd, like a sleeping core.
  std::thread receiver([&] {
    asleep = true;
    woke = Readable(p.b->wakeup_fd(), 10000);
    PumpUntil({p.b.get()}, [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); });
  });
  while (!asleep) std::this_thread::yield();
  const uint64_t payload = 0x0123456789abcdefull;
  // send() writes the ring and rings the doorbell: no progress() is needed
  // on the receiving side for its fd to fire.
  ASSERT_TRUE(p.a->Send(p.client, "ding", {{&payload, sizeof payload}}).ok());
  receiver.join();
  EXPECT_TRUE(woke) << "the receiver slept through the message";
  ASSERT_EQ(arrival.type, FERRY_EV_ARRIVAL);
  ASSERT_EQ(arrival.segments.size(), 1u);
  ASSERT_NE(arrival.segments[0].inline_data, nullptr) << "8 bytes arrive inline";
  EXPECT_EQ(std::memcmp(arrival.segments[0].inline_data, &payload, 8), 0);
  ASSERT_TRUE(p.b->t().Discard(p.server, arrival.msg_id).ok());
  ClosePair(&p);
}

TEST_F(DoorbellTest, SleepingSenderWakesWhenThePeerFreesRingSpace) {
  // A sender blocked on a full ring sleeps too; the consumer's progress
  // rings it once it frees space.
  SetParam("spin_us", "0");
  SetParam("cma", "0");
  SetParam("ring_size", "1M");
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  std::vector<unsigned char> big(8u << 20), in(8u << 20);
  FillPattern(big.data(), big.size(), 9);
  ASSERT_TRUE(p.a->Send(p.client, "big", {{big.data(), big.size()}}).ok());
  Event arrival;
  ASSERT_TRUE(
      PumpUntil({p.b.get()}, [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
  ASSERT_TRUE(p.b->PlaceAll(arrival, {in.data()}, nullptr).ok());
  // a is stuck on a full ring; let it go to sleep.
  ASSERT_TRUE(PumpUntil({p.a.get()}, [&] { return !Readable(p.a->wakeup_fd(), 0); }));
  p.b->PollOnce();  // consumes chunks, frees space, rings a's doorbell
  EXPECT_TRUE(Readable(p.a->wakeup_fd(), 10000)) << "the blocked sender was not woken";
  Event placed, done;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()}, [&] {
    return (placed.type || p.b->TryTake(FERRY_EV_PLACE_DONE, &placed)) &&
           (done.type || p.a->TryTake(FERRY_EV_SEND_DONE, &done));
  }));
  EXPECT_EQ(PatternMismatch(in.data(), in.size(), 9), -1);
  ClosePair(&p);
}

TEST_F(DoorbellTest, SleepingSenderWakesWhenThePeerFreesAnEarlyWrapsPad) {
  // After request/response traffic the writer goes back to offset 0 of a
  // drained ring behind a pad that covers the rest of it (ring.h, early
  // wrap), so a large message's record then has little room behind it and
  // its first chunk waits for the pad and the record to be consumed. Both
  // free space the sleeping sender needs: the consumer must ring for them
  // as it does for chunks.
  SetParam("spin_us", "0");
  SetParam("cma", "0");
  SetParam("ring_size", "1M");
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  ferry_shm::SegmentControl* seg = ConnectorSegment();
  ASSERT_NE(seg, nullptr);
  const uint64_t mask = seg->header.ring_size - 1;
  // Small messages one at a time until a's ring position is past 16 KiB,
  // every one consumed: the next record goes to offset 0 behind a pad.
  const char small[64] = "small";
  for (int i = 0;
       (__atomic_load_n(&seg->consumer.tail, __ATOMIC_ACQUIRE) & mask) < (16u << 10);
       ++i) {
    ASSERT_LT(i, 1000) << "the ring position never passed 16 KiB";
    ASSERT_TRUE(p.a->Send(p.client, "s", {{small, sizeof small}}).ok());
    Event arrival;
    ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                          [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
    ASSERT_TRUE(p.b->t().Discard(p.server, arrival.msg_id).ok());
  }
  std::vector<unsigned char> big(1u << 20), in(1u << 20);
  FillPattern(big.data(), big.size(), 11);
  ASSERT_TRUE(p.a->Send(p.client, "big", {{big.data(), big.size()}}).ok());
  // a wrote the record and waits for room for the first chunk: let it sleep.
  ASSERT_TRUE(PumpUntil({p.a.get()}, [&] { return !Readable(p.a->wakeup_fd(), 0); }));
  Event arrival;
  ASSERT_TRUE(
      PumpUntil({p.b.get()}, [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
  ASSERT_TRUE(p.b->PlaceAll(arrival, {in.data()}, nullptr).ok());
  p.b->PollOnce();  // no chunk yet: a has been waiting for the space just freed
  EXPECT_TRUE(Readable(p.a->wakeup_fd(), 10000))
      << "the sender waiting behind an early wrap's pad was not woken";
  Event placed, done;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()}, [&] {
    return (placed.type || p.b->TryTake(FERRY_EV_PLACE_DONE, &placed)) &&
           (done.type || p.a->TryTake(FERRY_EV_SEND_DONE, &done));
  }));
  EXPECT_EQ(placed.status, FERRY_OK) << placed.message;
  EXPECT_EQ(PatternMismatch(in.data(), in.size(), 11), -1);
  ClosePair(&p);
}

TEST_F(DoorbellTest, BusyPollKeepsTheWakeupFdReadable) {
  // Busy-poll: the host spins, nothing is ever armed, and a host that waits
  // on the fd anyway must not block.
  auto busy = Endpoint::Open(FERRY_INIT_BUSY_POLL);
  ASSERT_NE(busy, nullptr);
  EXPECT_TRUE(busy->t().HasCap(FERRY_CAP_BUSY_POLL));
  ASSERT_TRUE(busy->t().HasCap(FERRY_CAP_WAKEUP_FD));
  for (int i = 0; i < 1000; ++i) busy->PollOnce();
  EXPECT_TRUE(Readable(busy->wakeup_fd(), 0));
  SetParam("busy_poll", "1");
  auto by_param = Endpoint::Open();
  ASSERT_NE(by_param, nullptr);
  EXPECT_TRUE(by_param->t().HasCap(FERRY_CAP_BUSY_POLL));
  ferry::ClearPluginParam("shm", "busy_poll");
  auto adaptive = Endpoint::Open();
  ASSERT_NE(adaptive, nullptr);
  EXPECT_FALSE(adaptive->t().HasCap(FERRY_CAP_BUSY_POLL));
  for (int i = 0; i < 10; ++i) adaptive->PollOnce();
  EXPECT_FALSE(Readable(adaptive->wakeup_fd(), 0)) << "an idle adaptive context sleeps";
}

}  // namespace
}  // namespace ferry_shm_test
