// The fixture every shm test uses: a private socket directory per test
// (FERRY_SHM_SOCKET_DIR for peers, the socket_dir parameter here), plugin
// parameters set in-process and cleared afterwards, and a linked pair of
// contexts in this process when a test wants one.
#pragma once

#include "shm_layout.h"
#include "shm_test_support.h"

#include "testkit/params.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ferry_shm_test {

class ShmTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Sets plugin parameter `key` for contexts opened after this call.
  void SetParam(const std::string& key, const std::string& value);

  // Two contexts in this process, b listening and a connected to it.
  struct Pair {
    std::unique_ptr<Endpoint> a, b;
    ferry_conn_t* client = nullptr;  // a's
    ferry_conn_t* server = nullptr;  // b's
  };
  bool MakePair(Pair* p, uint32_t flags = 0);
  // Closes both ends and waits for their CLOSED.
  void ClosePair(Pair* p);

  // The shared segment a pair's connector sends through, as this process
  // maps it (shm_layout.h), or nullptr.
  static ferry_shm::SegmentControl* ConnectorSegment();

  // Spawns the helper peer with the test's socket directory.
  std::unique_ptr<Child> SpawnPeer(const std::vector<std::string>& args,
                                   const std::vector<std::string>& env = {});

  // The peer's next line, progressing `eps` meanwhile (a peer in set-up
  // needs our side to move too); "" after timeout_ms.
  std::string WaitLine(Child* peer, std::initializer_list<ferry::testkit::Endpoint*> eps,
                       int timeout_ms = 10000);

  std::string socket_dir_;
  std::unique_ptr<ferry::testkit::ScopedParams> params_;
};

}  // namespace ferry_shm_test
