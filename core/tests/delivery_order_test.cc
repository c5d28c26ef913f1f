// DeliveryOrder (engine/delivery_order.h): one source's deliveries run in
// the order they were queued, however many threads pump, and a delivery
// that waits for progress does not hold its source's later ones back.
#include "engine/delivery_order.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {
namespace {

using Source = DeliveryOrder::Source;
using Actions = std::vector<DeliveryOrder::Action>;

void RunAll(Actions& actions) {
  for (auto& a : actions) a();
  actions.clear();
}

// Two pumps: the first took message 1 off the wire, the second message 2,
// and the second runs its callbacks first (what a preempted thread does).
TEST(DeliveryOrderTest, LaterPumpQueuesBehindTheEarlierOne) {
  DeliveryOrder order;
  std::vector<int> seen;
  Actions first, second;
  order.Queue(
      Source::kMember, 7, [&] { seen.push_back(1); }, false, &first);
  order.Queue(
      Source::kMember, 7, [&] { seen.push_back(2); }, false, &second);
  EXPECT_EQ(first.size(), 1u);
  EXPECT_TRUE(second.empty())
      << "the second pump must leave message 2 to the strand's owner";
  RunAll(second);
  EXPECT_TRUE(seen.empty());
  RunAll(first);
  EXPECT_EQ(seen, (std::vector<int>{1, 2}));
}

TEST(DeliveryOrderTest, SourcesDoNotWaitForEachOther) {
  DeliveryOrder order;
  std::vector<int> seen;
  Actions a, b, c;
  order.Queue(
      Source::kMember, 1, [&] { seen.push_back(1); }, false, &a);
  order.Queue(
      Source::kMember, 2, [&] { seen.push_back(2); }, false, &b);
  // A store connection's id may equal a member's: a separate source.
  order.Queue(
      Source::kStore, 1, [&] { seen.push_back(3); }, false, &c);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(c.size(), 1u);
  RunAll(c);
  RunAll(b);
  EXPECT_EQ(seen, (std::vector<int>{3, 2}));
  RunAll(a);
  EXPECT_EQ(seen, (std::vector<int>{3, 2, 1}));
}

// The peer's death is its source's last delivery: it runs after the reply
// that arrived before it, and the source starts afresh afterwards.
TEST(DeliveryOrderTest, LastDeliveryRunsAfterEarlierOnesAndFreesTheSource) {
  DeliveryOrder order;
  std::vector<std::string> seen;
  Actions first, second;
  order.Queue(
      Source::kMember, 9, [&] { seen.push_back("reply"); }, false, &first);
  order.Queue(
      Source::kMember, 9, [&] { seen.push_back("gone"); }, true, &second);
  RunAll(second);
  RunAll(first);
  EXPECT_EQ(seen, (std::vector<std::string>{"reply", "gone"}));
  Actions again;
  order.Queue(
      Source::kMember, 9, [&] { seen.push_back("rejoined"); }, false, &again);
  ASSERT_EQ(again.size(), 1u);
  RunAll(again);
  EXPECT_EQ(seen.back(), "rejoined");
}

// A delivery that waits (a continuation making a synchronous call) runs
// what is queued behind it first, and gives its source up: a later message
// from the same source (the reply it waits for) is run by whoever pumps it.
TEST(DeliveryOrderTest, WaitingDeliveryHandsItsSourceOn) {
  DeliveryOrder order;
  std::vector<int> seen;
  Actions first, second, third;
  order.Queue(
      Source::kMember, 3,
      [&] {
        seen.push_back(1);
        DeliveryOrder::BeforeWait();
        EXPECT_EQ(seen, (std::vector<int>{1, 2}))
            << "message 2 was queued behind the waiter";
        order.Queue(
            Source::kMember, 3, [&] { seen.push_back(3); }, false, &third);
        EXPECT_EQ(third.size(), 1u)
            << "the waiter must not own its source while it waits";
        RunAll(third);  // another pump, while this delivery still waits
        seen.push_back(10);
      },
      false, &first);
  order.Queue(
      Source::kMember, 3, [&] { seen.push_back(2); }, false, &second);
  ASSERT_TRUE(second.empty());
  RunAll(first);
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3, 10}));
  // Nothing was left owned: the next message runs on its own pump.
  Actions fourth;
  order.Queue(
      Source::kMember, 3, [&] { seen.push_back(4); }, false, &fourth);
  EXPECT_EQ(fourth.size(), 1u);
}

TEST(DeliveryOrderTest, BeforeWaitOutsideADeliveryDoesNothing) {
  DeliveryOrder::BeforeWait();
  DeliveryOrder order;
  Actions a;
  int runs = 0;
  order.Queue(
      Source::kStore, 1, [&] { ++runs; }, false, &a);
  DeliveryOrder::BeforeWait();
  EXPECT_EQ(runs, 0);
  RunAll(a);
  EXPECT_EQ(runs, 1);
}

// The engine's situation: threads take turns taking events off the wire
// under one lock (the progress lock) and run the callbacks after releasing
// it. Every source's messages must arrive in order, and all of them.
TEST(DeliveryOrderTest, ManyPumpingThreadsKeepEachSourceInOrder) {
  constexpr int kThreads = 4;
  constexpr int kSources = 3;
  constexpr int kPerSource = 200000;
  DeliveryOrder order;
  std::mutex progress;
  int next[kSources] = {};  // next sequence number to take off the wire
  std::atomic<int> last_seen[kSources];
  std::atomic<int> out_of_order{0};
  std::atomic<int> delivered{0};
  for (auto& l : last_seen) l = -1;
  auto pump = [&](unsigned seed) {
    for (;;) {
      Actions actions;
      {
        std::lock_guard<std::mutex> l(progress);
        int taken = 0;
        for (int s = 0; s < kSources; ++s) {
          // Take a few events from some sources, as a transport batch does.
          const int n = static_cast<int>((seed = seed * 1103515245 + 12345) >> 16) % 3;
          for (int i = 0; i < n && next[s] < kPerSource; ++i, ++taken) {
            const int seq = next[s]++;
            order.Queue(
                Source::kMember, static_cast<uint64_t>(s),
                [&, s, seq] {
                  if (last_seen[s].exchange(seq) != seq - 1) ++out_of_order;
                  ++delivered;
                },
                seq == kPerSource - 1, &actions);
          }
        }
        if (taken == 0 && next[0] == kPerSource && next[1] == kPerSource &&
            next[2] == kPerSource) {
          return;
        }
      }
      RunAll(actions);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(pump, 17u * (t + 1));
  for (auto& t : threads) t.join();
  EXPECT_EQ(out_of_order.load(), 0);
  EXPECT_EQ(delivered.load(), kSources * kPerSource);
}

}  // namespace
}  // namespace ferry
