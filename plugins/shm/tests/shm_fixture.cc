#include "shm_fixture.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

namespace ferry_shm_test {

ferry_shm::SegmentControl* ShmTest::ConnectorSegment() {
  for (void* m : ShmMappings()) {
    auto* s = static_cast<ferry_shm::SegmentControl*>(m);
    if (s->header.magic == ferry_shm::kSegmentMagic &&
        s->header.role == ferry_shm::kRoleConnector) {
      return s;
    }
  }
  return nullptr;
}

void ShmTest::SetUp() {
  char tmpl[] = "/tmp/ferry-shm-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  socket_dir_ = tmpl;  // mkdtemp makes it 0700
  SetParam("socket_dir", socket_dir_);
}

void ShmTest::TearDown() {
  for (const std::string& k : params_) ferry::ClearPluginParam("shm", k);
  std::error_code ec;
  std::filesystem::remove_all(socket_dir_, ec);
}

void ShmTest::SetParam(const std::string& key, const std::string& value) {
  ferry::SetPluginParam("shm", key, value);
  params_.push_back(key);
}

bool ShmTest::MakePair(Pair* p, uint32_t flags) {
  std::string why;
  p->a = Endpoint::Open(flags, &why);
  p->b = Endpoint::Open(flags, &why);
  if (!p->a || !p->b) {
    ADD_FAILURE() << "cannot open the shm plugin: " << why;
    return false;
  }
  ferry_listener_t* l = nullptr;
  std::string addr = p->b->Listen(&l);
  if (addr.empty()) {
    ADD_FAILURE() << "listen failed";
    return false;
  }
  p->client = p->a->Connect(addr);
  Ev connected, accepted;
  bool ok = PumpUntil({p->a.get(), p->b.get()}, [&] {
    return (connected.type || p->a->Take(FERRY_EV_CONNECTED, &connected)) &&
           (accepted.type || p->b->Take(FERRY_EV_ACCEPTED, &accepted));
  });
  p->b->t()->CloseListener(l);
  if (!ok || connected.status != FERRY_OK) {
    ADD_FAILURE() << "no connection: " << connected.message;
    return false;
  }
  p->server = accepted.conn;
  return true;
}

void ShmTest::ClosePair(Pair* p) {
  if (p->client) p->a->t()->Close(p->client);
  if (p->server) p->b->t()->Close(p->server);
  Ev ca, cb;
  EXPECT_TRUE(PumpUntil({p->a.get(), p->b.get()}, [&] {
    return (!p->client || ca.type || p->a->Take(FERRY_EV_CLOSED, &ca, p->client)) &&
           (!p->server || cb.type || p->b->Take(FERRY_EV_CLOSED, &cb, p->server));
  })) << "no CLOSED after close()";
  p->client = p->server = nullptr;
}

std::string ShmTest::WaitLine(Child* peer, std::initializer_list<Endpoint*> eps,
                              int timeout_ms) {
  std::string line;
  PumpUntil(eps, [&] { return !(line = peer->ReadLine(0)).empty(); }, timeout_ms);
  return line;
}

std::unique_ptr<Child> ShmTest::SpawnPeer(const std::vector<std::string>& args,
                                          const std::vector<std::string>& env) {
  std::vector<std::string> e = {"FERRY_SHM_SOCKET_DIR=" + socket_dir_};
  e.insert(e.end(), env.begin(), env.end());
  auto c = Child::Spawn(FERRY_SHM_TEST_PEER, args, e);
  EXPECT_NE(c, nullptr) << "cannot spawn " << FERRY_SHM_TEST_PEER;
  return c;
}

}  // namespace ferry_shm_test
