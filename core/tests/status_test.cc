// ferry::Status keeps one pointer, null for OK (common/status.h). What a
// caller relies on: an error's code and text survive copies and moves, a
// copy is independent of its source, a moved-from Status is OK, and an OK
// code with a text keeps the text.
#include "common/status.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace ferry {
namespace {

TEST(Status, DefaultIsOkWithNoText) {
  Status st;
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(st.code(), FERRY_OK);
  EXPECT_EQ(st.message(), "");
  EXPECT_EQ(st.ToString(), "OK");
}

TEST(Status, AnErrorKeepsItsCodeAndText) {
  Status st(FERRY_PEER_GONE, "the peer closed the connection");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), FERRY_PEER_GONE);
  EXPECT_EQ(st.message(), "the peer closed the connection");
  EXPECT_EQ(st.ToString(), "PEER_GONE: the peer closed the connection");
}

TEST(Status, ACopyIsIndependentOfItsSource) {
  Status a(FERRY_UNAVAILABLE, "queue full");
  Status b = a;
  a = Status(FERRY_DATA_LOSS, "checksum");
  EXPECT_EQ(b.code(), FERRY_UNAVAILABLE);
  EXPECT_EQ(b.message(), "queue full");
  EXPECT_EQ(a.code(), FERRY_DATA_LOSS);
  Status c;
  c = b;  // copy-assign over an OK status
  EXPECT_EQ(c.message(), "queue full");
  c = Status();  // and back to OK
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(b.code(), FERRY_UNAVAILABLE);
}

TEST(Status, MovingLeavesTheSourceOk) {
  Status a(FERRY_INTERNAL, "bug");
  Status b = std::move(a);
  EXPECT_EQ(b.code(), FERRY_INTERNAL);
  EXPECT_TRUE(a.ok());  // NOLINT(bugprone-use-after-move): documented state
  Status c(FERRY_CANCELLED, "stopped");
  c = std::move(b);
  EXPECT_EQ(c.code(), FERRY_INTERNAL);
  EXPECT_EQ(c.message(), "bug");
}

TEST(Status, SelfAssignmentKeepsTheError) {
  Status a(FERRY_NOT_FOUND, "no such function");
  const Status& same = a;
  a = same;
  EXPECT_EQ(a.code(), FERRY_NOT_FOUND);
  EXPECT_EQ(a.message(), "no such function");
}

TEST(Status, AnOkCodeMayCarryAText) {
  Status st(FERRY_OK, "nothing to do");
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(st.message(), "nothing to do");
}

TEST(Status, StatusOrCarriesTheErrorOrTheValue) {
  StatusOr<std::string> bad(Status(FERRY_INVALID_ARGUMENT, "empty name"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "empty name");
  StatusOr<std::string> good(std::string("worker-1"));
  EXPECT_TRUE(good.ok());
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(good.value(), "worker-1");
}

}  // namespace
}  // namespace ferry
