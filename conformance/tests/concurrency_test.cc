// CONC-*: plugins that claim FERRY_CAP_THREAD_SAFE take send/place/discard/
// close from several threads at once, concurrently with progress() (which
// stays on one thread). Completion may then legitimately arrive before the
// posting call returns (another thread progressed), so the tracker's
// never-inline check is off here; exactly-once stays on. The single-threaded
// tests hold the never-inline rule.
#include "harness/conformance_test.h"

#include <atomic>
#include <thread>

namespace ferry::conformance {
namespace {

class ConcurrencyTest : public ConformanceTest {};

TEST_P(ConcurrencyTest, ConcurrentPosting) {
  FERRY_REQUIRE_CAP(a(), FERRY_CAP_THREAD_SAFE);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 250;
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  tracker().SetConcurrent(true);
  Inbox* in = NewInbox(link.server);
  // Messages are made up front: the fixture's message store is not shared.
  std::vector<std::vector<OutMessage*>> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      OutMessage* m = NewMessage(5000 + t * kPerThread + i, 8, {1 * kKiB});
      int32_t id[2] = {t, i};
      std::memcpy(m->header.data(), id, sizeof id);
      work[t].push_back(m);
    }
  }
  std::atomic<int> finished{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      const auto deadline = Clock::now() + milliseconds(30000);
      for (int i = 0; i < kPerThread && !failed;) {
        void* c = nullptr;
        Status s = TrySend(link.client, *work[t][i], &c);
        if (s.ok()) {
          ++i;
        } else if (s.code() == FERRY_UNAVAILABLE && Clock::now() < deadline) {
          std::this_thread::yield();  // the progress thread drains
        } else {
          ADD_FAILURE() << "thread " << t << " send " << i << ": " << s.ToString();
          failed = true;
        }
      }
      ++finished;
    });
  }
  const bool done = pump().RunUntil(
      [&] {
        return failed ||
               (finished == kThreads && in->complete() == kThreads * kPerThread &&
                tracker().Pending() == 0);
      },
      milliseconds(30000), "1000 messages posted from 4 threads");
  failed = failed || !done;
  for (std::thread& th : posters) th.join();
  tracker().SetConcurrent(false);
  ASSERT_TRUE(done);
  std::vector<std::vector<int>> seen(kThreads, std::vector<int>(kPerThread, 0));
  std::vector<int> last(kThreads, -1);
  for (const InMessage& m : in->messages()) {
    int32_t id[2];
    std::memcpy(id, m.header.data(), sizeof id);
    ASSERT_TRUE(id[0] >= 0 && id[0] < kThreads && id[1] >= 0 && id[1] < kPerThread);
    ++seen[id[0]][id[1]];
    EXPECT_TRUE(SameMessage(*work[id[0]][id[1]], m));
    if (a()->HasCap(FERRY_CAP_ORDERED)) {
      EXPECT_GT(id[1], last[id[0]])
          << "thread " << id[0] << "'s messages arrived out of order";
    }
    last[id[0]] = id[1];
  }
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      EXPECT_EQ(seen[t][i], 1) << "thread " << t << " message " << i;
    }
  }
}

TEST_P(ConcurrencyTest, CloseWhilePosting) {
  FERRY_REQUIRE_CAP(a(), FERRY_CAP_THREAD_SAFE);
  constexpr int kThreads = 3;
  constexpr int kPerThread = 300;
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  tracker().SetConcurrent(true);
  NewInbox(link.server);
  std::vector<std::vector<OutMessage*>> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i)
      work[t].push_back(NewMessage(6000 + t * 1000 + i, 8, {4 * kKiB}));
  }
  std::atomic<int> posted{0};
  std::atomic<int> posters_left{kThreads};
  std::atomic<bool> close_starting{false};  // set before close(): a refusal
                                            // after it is legitimate
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto deadline = Clock::now() + kOpTimeout;
      for (int i = 0; i < kPerThread;) {
        void* c = nullptr;
        Status s = TrySend(link.client, *work[t][i], &c);
        if (s.ok()) {
          ++posted;
          ++i;
        } else if (s.code() == FERRY_UNAVAILABLE && Clock::now() < deadline) {
          std::this_thread::yield();
        } else {
          // Refused for good: the connection is closing.
          if (!close_starting)
            ADD_FAILURE() << "send refused before close(): " << s.ToString();
          EXPECT_NE(StatusText(s.code()), StatusText(FERRY_UNAVAILABLE))
              << "send() on a closing connection kept asking to be retried";
          break;
        }
      }
      --posters_left;
    });
  }
  threads.emplace_back([&] {
    while (posted < 100 && posters_left > 0) std::this_thread::yield();
    close_starting = true;
    CloseConn(link.client);  // from its own thread, racing the posters
  });
  // Progress until close() is about to be called, then stop until the
  // posters have stopped: CLOSED invalidates the handle they are still
  // passing to send(). (A progress() already running may still return
  // CLOSED; the pump then judges only posts whose call has returned.)
  pump().RunUntil([&] { return close_starting.load(); }, milliseconds(30000),
                  "the closing thread to call close()");
  for (std::thread& th : threads) th.join();
  tracker().SetConcurrent(false);
  ASSERT_TRUE(WaitClosed(link.client));
  EXPECT_EQ(tracker().Pending(link.client), 0u);
  RecordProperty("posted_before_close", std::to_string(posted.load()));
}

INSTANTIATE_TEST_SUITE_P(Plugins, ConcurrencyTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
