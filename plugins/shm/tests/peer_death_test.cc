// A peer SIGKILLed in the middle of a message: every pending operation ends
// with PEER_GONE in bounded time, the connection reports CONN_BROKEN once,
// and nothing is left behind: no file in /dev/shm (segments are memfds), no
// socket file of the dead listener (survivors sweep it), no mapping, no fd.
#include "shm_fixture.h"

#include <algorithm>

namespace ferry_shm_test {
namespace {

class PeerDeathTest : public ShmTest {};

TEST_F(PeerDeathTest, SigkillMidMessageFailsEverythingAndLeavesNothing) {
  // Ring copy both ways: the peer's 64 MiB message is half-written when it
  // dies, and our 16 MiB send is stuck behind its unanswered arrival.
  SetParam("cma", "0");
  const auto dev_shm_before = ListDir("/dev/shm");
  const int fds_before = CountFds();
  {
    auto ep = Endpoint::Open();
    ASSERT_NE(ep, nullptr);
    auto peer =
        SpawnPeer({"listen-send-big", std::to_string(64u << 20)}, {"FERRY_SHM_CMA=0"});
    const std::string line = peer->ReadLine();
    ASSERT_EQ(line.rfind("listening ", 0), 0u) << line;
    const std::string addr = line.substr(10);
    ferry_conn_t* conn = ep->Connect(addr);
    ASSERT_NE(conn, nullptr);
    Event ev;
    ASSERT_TRUE(
        PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_CONNECTED, &ev); }));
    ASSERT_EQ(ev.status, FERRY_OK) << ev.message;
    ASSERT_EQ(WaitLine(peer.get(), {ep.get()}), "accepted");
    // Generous: filling 64 MiB takes a while under sanitizers.
    ASSERT_EQ(WaitLine(peer.get(), {ep.get()}, 60000), "posted");
    std::vector<unsigned char> mine(16u << 20, 1);
    ASSERT_TRUE(ep->Send(conn, "stuck", {{mine.data(), mine.size()}}, &mine).ok());
    Event arrival;
    ASSERT_TRUE(
        PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
    std::vector<unsigned char> in(64u << 20);
    ASSERT_TRUE(ep->PlaceAll(arrival, {in.data()}, &in).ok());
    // Some chunks land, but never the whole message: one progress() moves at
    // most kCopyBudget (16 MiB) and the peer can be at most one 2 MiB ring
    // ahead, so two polls leave at least 30 MiB unwritten when it dies.
    for (int i = 0; i < 2; ++i) ep->PollOnce();

    peer->Kill();  // SIGKILL and reap
    const auto killed = Clock::now();
    Event placed, sent, broken;
    ASSERT_TRUE(PumpUntil({ep.get()}, [&] {
      return (placed.type || ep->TryTake(FERRY_EV_PLACE_DONE, &placed)) &&
             (sent.type || ep->TryTake(FERRY_EV_SEND_DONE, &sent)) &&
             (broken.type || ep->TryTake(FERRY_EV_CONN_BROKEN, &broken));
    })) << "pending operations did not end after the peer was killed";
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
    EXPECT_LT(ms.count(), 5000);
    EXPECT_EQ(placed.status, FERRY_PEER_GONE) << placed.message;
    EXPECT_EQ(sent.status, FERRY_PEER_GONE) << sent.message;
    EXPECT_EQ(broken.status, FERRY_PEER_GONE) << broken.message;
    EXPECT_FALSE(placed.message.empty());
    // Later sends are refused at once.
    Status st = ep->Send(conn, "late", {});
    EXPECT_EQ(st.code(), FERRY_PEER_GONE) << st.ToString();
    for (int i = 0; i < 100; ++i) ep->PollOnce();
    EXPECT_FALSE(ep->TryTake(FERRY_EV_CONN_BROKEN, &ev)) << "CONN_BROKEN twice";

    // The dead listener's socket file is gone (we swept it).
    EXPECT_TRUE(ListDir(socket_dir_).empty())
        << "left in " << socket_dir_ << ": " << ListDir(socket_dir_)[0];
    ep->t().Close(conn);
    ASSERT_TRUE(PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_CLOSED, &ev); }));
    EXPECT_TRUE(ShmMappings().empty()) << "a segment is still mapped after CLOSED";
  }
  auto dev_shm_after = ListDir("/dev/shm");
  std::sort(dev_shm_after.begin(), dev_shm_after.end());
  auto before = dev_shm_before;
  std::sort(before.begin(), before.end());
  EXPECT_EQ(dev_shm_after, before) << "/dev/shm changed";
  EXPECT_EQ(CountFds(), fds_before) << "fds leaked";
}

TEST_F(PeerDeathTest, SigkilledConnectorBreaksTheListenerSide) {
  auto ep = Endpoint::Open();
  ASSERT_NE(ep, nullptr);
  ferry_listener_t* l = nullptr;
  const std::string addr = ep->Listen(&l);
  auto peer = SpawnPeer({"send-big", addr, std::to_string(64u << 20)},
                        {"FERRY_SHM_CMA_MAX=0"});  // by CMA: its bytes die with it
  Event acc, arrival, broken;
  ASSERT_TRUE(
      PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_ACCEPTED, &acc); }));
  ASSERT_EQ(WaitLine(peer.get(), {ep.get()}, 60000), "posted");
  ASSERT_TRUE(
      PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
  peer->Kill();
  // With CMA the bytes live in the dead process: placing fails.
  std::vector<unsigned char> in(64u << 20);
  Status st = ep->PlaceAll(arrival, {in.data()}, nullptr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  Event placed;
  ASSERT_TRUE(PumpUntil({ep.get()}, [&] {
    return (placed.type || ep->TryTake(FERRY_EV_PLACE_DONE, &placed)) &&
           (broken.type || ep->TryTake(FERRY_EV_CONN_BROKEN, &broken));
  }));
  EXPECT_EQ(placed.status, FERRY_PEER_GONE) << placed.message;
  EXPECT_EQ(broken.status, FERRY_PEER_GONE) << broken.message;
  ep->t().Close(acc.conn);
  ep->t().CloseListener(l);
  Event closed;
  ASSERT_TRUE(
      PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_CLOSED, &closed); }));
  EXPECT_TRUE(ListDir(socket_dir_).empty());
}

}  // namespace
}  // namespace ferry_shm_test
