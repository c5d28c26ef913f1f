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
  params_ = std::make_unique<ferry::testkit::ScopedParams>("shm");
  SetParam("socket_dir", socket_dir_);
}

void ShmTest::TearDown() {
  params_.reset();
  std::error_code ec;
  std::filesystem::remove_all(socket_dir_, ec);
}

void ShmTest::SetParam(const std::string& key, const std::string& value) {
  params_->Set(key, value);
}

bool ShmTest::MakePair(Pair* p, uint32_t flags) {
  std::string why;
  p->a = Endpoint::Open(flags, &why);
  p->b = Endpoint::Open(flags, &why);
  if (!p->a || !p->b) {
    ADD_FAILURE() << "cannot open the shm plugin: " << why;
    return false;
  }
  ferry::testkit::Link link;
  const bool ok = ferry::testkit::Connect(p->a.get(), p->b.get(), "", &link, nullptr,
                                          std::chrono::milliseconds(10000));
  if (link.listener != nullptr) p->b->t().CloseListener(link.listener);
  if (!ok) return false;
  p->client = link.client;
  p->server = link.server;
  return true;
}

void ShmTest::ClosePair(Pair* p) {
  if (p->client) p->a->t().Close(p->client);
  if (p->server) p->b->t().Close(p->server);
  Event ca, cb;
  EXPECT_TRUE(PumpUntil({p->a.get(), p->b.get()}, [&] {
    return (!p->client || ca.type || p->a->TryTake(FERRY_EV_CLOSED, &ca, p->client)) &&
           (!p->server || cb.type || p->b->TryTake(FERRY_EV_CLOSED, &cb, p->server));
  })) << "no CLOSED after close()";
  p->client = p->server = nullptr;
}

std::string ShmTest::WaitLine(Child* peer,
                              std::initializer_list<ferry::testkit::Endpoint*> eps,
                              int timeout_ms) {
  std::string line;
  PumpUntil(
      eps, [&] { return !(line = peer->ReadLine(0)).empty(); }, timeout_ms);
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
