// Access control: the socket directory is private (0700) and each socket
// 0600, so other users cannot even reach a listener; and a listener that
// someone made reachable still refuses another uid (SO_PEERCRED) before any
// memory is shared.
#include "shm_fixture.h"

#include <sys/stat.h>
#include <unistd.h>

namespace ferry_shm_test {
namespace {

class SecurityTest : public ShmTest {};

TEST_F(SecurityTest, SocketDirectoryAndSocketsArePrivate) {
  auto ep = Endpoint::Open();
  ASSERT_NE(ep, nullptr);
  ferry_listener_t* l = nullptr;
  const std::string addr = ep->Listen(&l);
  ASSERT_FALSE(addr.empty());
  EXPECT_EQ(addr.rfind(socket_dir_ + "/", 0), 0u) << addr;
  struct stat st {};
  ASSERT_EQ(stat(addr.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(socket_dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ep->t().CloseListener(l);
  EXPECT_NE(stat(addr.c_str(), &st), 0) << "close_listener must unlink the socket";
}

TEST_F(SecurityTest, ADirectoryOthersCanEnterIsRefused) {
  ASSERT_EQ(chmod(socket_dir_.c_str(), 0755), 0);
  auto ep = Endpoint::Open();
  ASSERT_NE(ep, nullptr);
  ferry_listener_t* l = nullptr;
  ferry::Status st = ep->t().Listen("", nullptr, &l);
  EXPECT_EQ(st.code(), FERRY_PERMISSION_DENIED) << st.ToString();
  EXPECT_NE(st.message().find("0700"), std::string::npos) << st.message();
}

TEST_F(SecurityTest, AnotherUidIsRefused) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root to run the peer as another uid (uid " << geteuid() << ")";
  }
  const uid_t nobody = 65534;
  // Open everything up on purpose, so only the SO_PEERCRED check stands
  // between the other user and our memory.
  ASSERT_EQ(chmod(socket_dir_.c_str(), 0755), 0);
  const std::string path = socket_dir_ + "/open.sock";
  auto ep = Endpoint::Open();
  ASSERT_NE(ep, nullptr);
  ferry_listener_t* l = nullptr;
  ASSERT_EQ(ep->Listen(&l, path), path);
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  auto peer = SpawnPeer({"connect", path, std::to_string(nobody)});
  // The peer learns the verdict only after our accept refused it, so this
  // line proves the refusal already happened here.
  const std::string line = WaitLine(peer.get(), {ep.get()});
  ASSERT_FALSE(line.empty()) << "the peer never reported";
  if (line.rfind("error setuid", 0) == 0) GTEST_SKIP() << "cannot setuid here: " << line;
  ASSERT_EQ(line.rfind("result ", 0), 0u) << line;
  EXPECT_EQ(std::atoi(line.c_str() + 7), FERRY_PERMISSION_DENIED) << line;
  EXPECT_NE(line.find("uid"), std::string::npos) << line;
  for (int i = 0; i < 100; ++i) ep->PollOnce();
  Event ev;
  EXPECT_FALSE(ep->TryTake(FERRY_EV_ACCEPTED, &ev))
      << "another uid's connection was accepted";
  EXPECT_EQ(peer->Wait(), 0);
  ep->t().CloseListener(l);
}

TEST_F(SecurityTest, DomainNamesHostIpcNamespaceAndUser) {
  auto ep = Endpoint::Open();
  ASSERT_NE(ep, nullptr);
  const std::string d = ep->t().domain();
  EXPECT_EQ(d.rfind("host=", 0), 0u) << d;
  EXPECT_NE(d.find(";ipc="), std::string::npos) << d;
  EXPECT_NE(d.find(";user=" + std::to_string(getuid())), std::string::npos) << d;
  EXPECT_EQ(ep->t().info().priority, 50);
  SetParam("domain_override", "host=pretend-b");
  auto other = Endpoint::Open();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->t().domain(), "host=pretend-b");
}

}  // namespace
}  // namespace ferry_shm_test
