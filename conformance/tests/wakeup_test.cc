// WAKE-*: the wakeup fd is what lets the core sleep instead of spinning. It
// must become readable when there is something for progress() to do (a
// message arrived, an own operation can complete) and go quiet once
// everything has been returned. The sender is a peer process that drives
// its own progress, so the context under test is really left alone while we
// poll() its fd.
#include "harness/conformance_test.h"

#include <poll.h>
#include <sys/wait.h>

namespace ferry::conformance {
namespace {

// In busy-poll mode the host spins and never sleeps on the fd, and a plugin
// may keep it signalled for good (tcp does): nothing here applies.
#define FERRY_REQUIRE_SLEEPING_WAKEUP_FD()                            \
  do {                                                                \
    FERRY_REQUIRE_CAP(a(), FERRY_CAP_WAKEUP_FD);                      \
    if (a()->HasCap(FERRY_CAP_BUSY_POLL)) {                           \
      FERRY_NOT_RUN(                                                  \
          "the context runs in busy-poll mode (FERRY_CAP_BUSY_POLL):" \
          " the host spins instead of sleeping on the wakeup fd");    \
    }                                                                 \
  } while (0)

class WakeupTest : public ConformanceTest {
 protected:
  static bool Readable(int fd, int timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN) != 0;
  }
  // Progresses until every context's wakeup fd is quiet; false (with a
  // failure) when one stays readable.
  bool DrainUntilQuiet() {
    auto quiet = [&] {
      for (Transport* t : {a(), b()}) {
        if (Readable(t->info().wakeup_fd, 0)) return false;
      }
      return true;
    };
    if (pump().RunQuietlyUntil(quiet, milliseconds(3000))) return true;
    ADD_FAILURE() << "WAKE-3: the wakeup fd stays readable although progress() has "
                     "returned everything (3 s of progress): a core sleeping on it "
                     "would spin\n  last events:\n"
                  << pump().RecentEvents();
    return false;
  }
  ferry_conn_t* AcceptPeer(const std::string& mode, PeerProcess** peer) {
    std::string address;
    ferry_listener_t* listener = Listen(a(), &address);
    if (listener == nullptr) return nullptr;
    *peer = SpawnPeer(mode, address);
    if (*peer == nullptr) return nullptr;
    ferry_conn_t* conn = nullptr;
    if (!pump().RunUntil(
            [&] { return (conn = conn ? conn : TakeAccepted(listener)) != nullptr; },
            kOpTimeout, "ACCEPTED from the peer process") ||
        !WaitPeerSays(*peer, "ready")) {
      return nullptr;
    }
    return conn;
  }
};

TEST_P(WakeupTest, WakeupFdSignalsArrival) {
  FERRY_REQUIRE_SLEEPING_WAKEUP_FD();
  PeerProcess* peer = nullptr;
  ferry_conn_t* conn = AcceptPeer("send-on-cue", &peer);
  ASSERT_NE(conn, nullptr);
  Inbox* in = NewInbox(conn);
  ASSERT_TRUE(DrainUntilQuiet());
  ASSERT_TRUE(peer->Tell("send"));
  // No progress on our side now: only the fd may tell us.
  const auto start = Clock::now();
  ASSERT_TRUE(Readable(a()->info().wakeup_fd, static_cast<int>(kOpTimeout.count())))
      << "the wakeup fd did not become readable within 10 s although a peer sent this "
         "context a message: a core sleeping on it would never wake";
  RecordProperty("wake_ms", std::to_string(ElapsedMs(start)));
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1; }, kOpTimeout,
                              "the arrival that woke the fd"));
  EXPECT_EQ(in->messages()[0].header, (std::vector<unsigned char>{'w', 'a', 'k', 'e'}));
  ASSERT_EQ(in->messages()[0].segments.size(), 1u);
  EXPECT_EQ(PatternMismatch(in->messages()[0].segments[0].data(), 100, 100), -1);
  EXPECT_TRUE(WaitPeerSays(peer, "sent"));
  peer->CloseChannel();
}

TEST_P(WakeupTest, WakeupFdSignalsCompletion) {
  FERRY_REQUIRE_SLEEPING_WAKEUP_FD();
  PeerProcess* peer = nullptr;
  ferry_conn_t* conn = AcceptPeer("echo", &peer);  // it keeps progressing
  ASSERT_NE(conn, nullptr);
  Inbox* in = NewInbox(conn);
  ASSERT_TRUE(DrainUntilQuiet());
  OutMessage* m = NewMessage(7000, 16, {64 * kKiB});
  void* c = nullptr;
  ASSERT_TRUE(TrySend(conn, *m, &c).ok());
  ASSERT_TRUE(Readable(a()->info().wakeup_fd, static_cast<int>(kOpTimeout.count())))
      << "after send() the wakeup fd did not become readable within 10 s: a core "
         "that posts and then sleeps on the fd would never see SEND_DONE";
  ASSERT_TRUE(WaitOk(c, "SEND_DONE"));
  ASSERT_TRUE(
      pump().RunUntil([&] { return in->complete() == 1; }, kOpTimeout, "the echo"));
  EXPECT_TRUE(SameMessage(*m, in->messages()[0]));
  peer->CloseChannel();
}

TEST_P(WakeupTest, WakeupFdQuietWhenIdle) {
  FERRY_REQUIRE_SLEEPING_WAKEUP_FD();
  // Fresh contexts, then after traffic: once progress() has returned
  // everything, the fd must stop being readable.
  ASSERT_TRUE(DrainUntilQuiet());
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  OutMessage* m = NewMessage(7100, 16, {256 * kKiB});
  ASSERT_NE(Send(link.client, *m), nullptr);
  ASSERT_TRUE(
      pump().RunUntil([&] { return in->complete() == 1 && tracker().Pending() == 0; },
                      kOpTimeout, "one message"));
  EXPECT_TRUE(DrainUntilQuiet());
}

TEST_P(WakeupTest, WakeupFdSignalsQueuedEvents) {
  FERRY_REQUIRE_SLEEPING_WAKEUP_FD();
  // Events no socket announces: CLOSED, queued by close() itself, and
  // events left over because the host's array was smaller than the queue.
  Link first, second;
  ASSERT_TRUE(MakeLink(&first));
  ASSERT_TRUE(MakeLink(&second));
  ASSERT_TRUE(DrainUntilQuiet());
  CloseConn(first.client);
  ASSERT_TRUE(Readable(b()->info().wakeup_fd, static_cast<int>(kOpTimeout.count())))
      << "after close() the wakeup fd did not become readable within 10 s: a core "
         "that closes and then sleeps on the fd would never see FERRY_EV_CLOSED";
  ASSERT_TRUE(WaitClosed(first.client));
  ASSERT_TRUE(DrainUntilQuiet());
  // Two connections closed at once: at least two events wait. Take one.
  CloseConn(second.client);
  CloseConn(second.server);
  pump().SetMaxEvents(1);
  pump().PollOnce();
  const bool left_over =
      !pump().IsClosed(second.client) || !pump().IsClosed(second.server);
  if (left_over) {
    EXPECT_TRUE(Readable(b()->info().wakeup_fd, 1000) ||
                Readable(a()->info().wakeup_fd, 1000))
        << "progress() returned 1 event (max_events 1) and left a CLOSED queued, but the "
           "wakeup fd is not readable: level-triggered means readable while events wait";
  }
  pump().SetMaxEvents(32);
  EXPECT_TRUE(pump().RunUntil(
      [&] { return pump().IsClosed(second.client) && pump().IsClosed(second.server); },
      kOpTimeout, "CLOSED for both ends"));
}

INSTANTIATE_TEST_SUITE_P(Plugins, WakeupTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
