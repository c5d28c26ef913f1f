// ferry::Limits (common/limits.h): what an application set wins, then the
// FERRY_* environment, then the defaults; a bad variable is refused by
// name; every error at a limit names it, its value and how to raise it.
#include "common/limits.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

class LimitsResolve : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v :
         {"FERRY_MAX_MESSAGE_SIZE", "FERRY_MAX_CALLS_IN_FLIGHT_PER_PEER",
          "FERRY_MAX_QUEUED_BYTES_PER_CONNECTION", "FERRY_MAX_QUEUED_CALLS",
          "FERRY_MAX_CONNECTIONS", "FERRY_HANDSHAKE_TIMEOUT_MS"}) {
      unsetenv(v);
    }
  }
};

TEST_F(LimitsResolve, UnsetLimitsTakeTheirDefaults) {
  ferry::Limits l = ferry::Limits::Unset();
  ASSERT_TRUE(l.Resolve().ok());
  EXPECT_EQ(l.max_message_size, uint64_t{4} << 30);
  EXPECT_EQ(l.max_calls_in_flight_per_peer, 4096u);
  EXPECT_EQ(l.max_queued_bytes_per_connection, uint64_t{1} << 30);
  EXPECT_EQ(l.max_queued_calls, 65536u);
  EXPECT_GE(l.max_connections, 1u);
  EXPECT_LE(l.max_connections, 4096u);
  EXPECT_EQ(l.handshake_timeout.count(), 0) << "0: the peer timeout";
}

TEST_F(LimitsResolve, TheEnvironmentFillsWhatTheApplicationLeftUnset) {
  setenv("FERRY_MAX_QUEUED_CALLS", "100", 1);
  setenv("FERRY_MAX_MESSAGE_SIZE", "8589934592", 1);  // 8 GiB: 64-bit
  setenv("FERRY_HANDSHAKE_TIMEOUT_MS", "250", 1);
  setenv("FERRY_MAX_CONNECTIONS", "7", 1);
  ferry::Limits l = ferry::Limits::Unset();
  l.max_connections = 9;  // set by the application: wins
  ASSERT_TRUE(l.Resolve().ok());
  EXPECT_EQ(l.max_queued_calls, 100u);
  EXPECT_EQ(l.max_message_size, uint64_t{8} << 30);
  EXPECT_EQ(l.handshake_timeout.count(), 250);
  EXPECT_EQ(l.max_connections, 9u);
}

TEST_F(LimitsResolve, ABadVariableIsRefusedByName) {
  for (const char* bad : {"lots", "-1", "0", "99999999999", "12abc"}) {
    setenv("FERRY_MAX_CALLS_IN_FLIGHT_PER_PEER", bad, 1);
    ferry::Limits l = ferry::Limits::Unset();
    const ferry::Status s = l.Resolve();
    EXPECT_EQ(s.code(), FERRY_INVALID_ARGUMENT) << bad;
    EXPECT_NE(s.message().find("FERRY_MAX_CALLS_IN_FLIGHT_PER_PEER='"), std::string::npos)
        << s.message();
  }
}

TEST_F(LimitsResolve, AnErrorAtALimitNamesItItsValueAndHowToRaiseIt) {
  const std::string d = ferry::Limits::Describe("max_queued_calls", 64);
  EXPECT_EQ(d,
            "the limit max_queued_calls (64; raise it with "
            "ferry_limits_t.max_queued_calls, FERRY_MAX_QUEUED_CALLS, or Python's "
            "init_rpc(limits={'max_queued_calls': ...}); docs/limits.md)");
  EXPECT_EQ(ferry::Limits::EnvName("handshake_timeout_ms"), "FERRY_HANDSHAKE_TIMEOUT_MS");
}

}  // namespace
