// ParseMsg on hand-made MSG frames: what a well-formed frame yields, and that
// a frame which lies about its contents (cut short anywhere, too many
// segments, lengths past its end, modes that contradict its sender
// operation) is refused with FERRY_DATA_LOSS instead of being read past its
// end. Run under ASan (scripts/sanitize.sh address), a read past the end
// fails the test even where the result looks right.
#include "msg_parse.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace ferry_fabric {
namespace {

struct Seg {
  std::string inline_bytes;  // kInline: these bytes travel in the frame
  uint8_t mode = wire::kInline;
  uint64_t length = 0;  // kRma / kStream: the announced length
};

// Encodes a MSG frame the way the plugin's sender lays it out: fixed part,
// segment table, RMA descriptors, header, inline bytes.
std::vector<char> Frame(const std::string& header, const std::vector<Seg>& segs,
                        uint64_t op_id, uint32_t seq = 7) {
  std::vector<char> f;
  auto put = [&f](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    f.insert(f.end(), c, c + n);
  };
  wire::Msg m;
  m.head = wire::MakeHead(wire::kMsg, 42, seq);
  m.op_id = op_id;
  m.header_len = static_cast<uint32_t>(header.size());
  m.num_segments = static_cast<uint16_t>(segs.size());
  m.reserved = 0;
  put(&m, sizeof m);
  for (const Seg& s : segs) {
    wire::SegEntry e{};
    e.length = s.mode == wire::kInline ? s.inline_bytes.size() : s.length;
    e.device_type = FERRY_DEVICE_CPU;
    e.mode = s.mode;
    put(&e, sizeof e);
  }
  for (const Seg& s : segs) {
    if (s.mode != wire::kRma) continue;
    wire::RemoteEntry r{0x1000, 0x77};
    put(&r, sizeof r);
  }
  put(header.data(), header.size());
  for (const Seg& s : segs) {
    if (s.mode == wire::kInline) put(s.inline_bytes.data(), s.inline_bytes.size());
  }
  return f;
}

const char* InlineData(const RxMsg& m, size_t i) {
  return static_cast<const char*>(m.segs[i].inline_data);
}

std::string InlineBytes(const RxMsg& m, size_t i) {
  return std::string(InlineData(m, i), m.segs[i].length);
}

TEST(FabricMsgParse, AllInlineMessageYieldsHeaderAndSegmentsInPlace) {
  const std::vector<char> f = Frame("hdr", {{"first"}, {""}, {"third!"}}, 0, 9);
  RxMsg m;
  ASSERT_TRUE(ParseMsg(f.data(), f.size(), 64, false, &m).ok());
  EXPECT_EQ(std::string(m.header, m.header_len), "hdr");
  ASSERT_EQ(m.segs.size(), 3u);
  EXPECT_EQ(InlineBytes(m, 0), "first");
  EXPECT_EQ(m.segs[1].length, 0u);
  EXPECT_EQ(InlineBytes(m, 2), "third!");
  EXPECT_EQ(m.segs[2].struct_size, sizeof(ferry_arrival_segment_t));
  EXPECT_EQ(m.segs[2].device.type, FERRY_DEVICE_CPU);
  for (const BulkSeg& b : m.bulk) EXPECT_EQ(b.mode, wire::kInline);
  EXPECT_FALSE(m.has_rma || m.has_stream);
  EXPECT_EQ(m.seq, 9u);
  EXPECT_EQ(m.sender_op, 0u);
  // The inline bytes are read where they lie, not copied.
  EXPECT_GE(InlineData(m, 0), f.data());
  EXPECT_LE(InlineData(m, 2) + m.segs[2].length, f.data() + f.size());
}

TEST(FabricMsgParse, MessageWithLargeSegmentsNamesWhatTheReceiverReads) {
  Seg rma;
  rma.mode = wire::kRma;
  rma.length = 1 << 20;
  const std::vector<char> f = Frame("h", {{"small"}, rma}, /*op_id=*/5);
  RxMsg m;
  ASSERT_TRUE(ParseMsg(f.data(), f.size(), 64, true, &m).ok());
  ASSERT_EQ(m.segs.size(), 2u);
  EXPECT_EQ(InlineBytes(m, 0), "small");
  EXPECT_EQ(m.segs[1].length, 1u << 20);
  EXPECT_EQ(m.segs[1].inline_data, nullptr);
  EXPECT_EQ(m.bulk[1].mode, wire::kRma);
  EXPECT_EQ(m.bulk[1].remote.addr, 0x1000u);
  EXPECT_EQ(m.bulk[1].remote.key, 0x77u);
  EXPECT_TRUE(m.has_rma);
  EXPECT_EQ(m.sender_op, 5u);
  // Without RMA on this side, the same frame cannot be honoured.
  RxMsg m2;
  Status st = ParseMsg(f.data(), f.size(), 64, false, &m2);
  EXPECT_EQ(st.code, FERRY_DATA_LOSS);
  EXPECT_NE(st.message.find("no RMA"), std::string::npos) << st.message;
}

TEST(FabricMsgParse, EveryTruncationIsRefused) {
  Seg rma;
  rma.mode = wire::kRma;
  rma.length = 4096;
  for (const std::vector<char>& full :
       {Frame("header", {{"abc"}, {"defgh"}}, 0), Frame("hh", {{"x"}, rma}, 3)}) {
    for (size_t len = 0; len < full.size(); ++len) {
      // A copy of exactly `len` bytes, so that ASan sees any read past it.
      std::vector<char> cut(full.begin(), full.begin() + static_cast<long>(len));
      RxMsg m;
      Status st = ParseMsg(cut.data(), cut.size(), 64, true, &m);
      EXPECT_EQ(st.code, FERRY_DATA_LOSS)
          << "accepted a frame cut to " << len << " of " << full.size() << " bytes";
      EXPECT_NE(st.message.find("malformed"), std::string::npos) << st.message;
    }
  }
}

TEST(FabricMsgParse, LyingCountsAndLengthsAreRefused) {
  auto refused = [](std::vector<char> f, uint32_t max_segments, const char* why) {
    RxMsg m;
    Status st = ParseMsg(f.data(), f.size(), max_segments, true, &m);
    EXPECT_EQ(st.code, FERRY_DATA_LOSS) << why;
    EXPECT_NE(st.message.find(why), std::string::npos) << st.message;
  };
  refused(Frame("", {{"a"}, {"b"}, {"c"}}, 0), 2, "too many segments");

  // A segment claiming more bytes than the frame holds (up to 2^64 - 1).
  for (uint64_t lie : {uint64_t{6}, uint64_t{1} << 40, ~uint64_t{0}}) {
    std::vector<char> f = Frame("h", {{"abcde"}}, 0);
    std::memcpy(f.data() + sizeof(wire::Msg), &lie, sizeof lie);
    refused(f, 64, "truncated inline segment");
  }
  // A header longer than what follows the table.
  std::vector<char> f = Frame("hdr", {{"abc"}}, 0);
  const uint32_t long_header = 1000;
  std::memcpy(f.data() + offsetof(wire::Msg, header_len), &long_header,
              sizeof long_header);
  refused(f, 64, "truncated header");

  // Large segments need a sender operation to answer; unknown modes are not.
  Seg rma;
  rma.mode = wire::kRma;
  rma.length = 4096;
  refused(Frame("", {rma}, 0), 64, "without a sender operation");
  Seg stream;
  stream.mode = wire::kStream;
  stream.length = 4096;
  refused(Frame("", {stream}, 0), 64, "without a sender operation");
  Seg odd;
  odd.mode = 9;
  odd.length = 1;
  refused(Frame("", {odd}, 0), 64, "unknown segment mode");
  refused(Frame("", {odd}, 4), 64, "unknown segment mode");
}

TEST(FabricMsgParse, ReusedMessageCarriesNothingOver) {
  // RxMsg objects are pooled: a small message parsed into one that held a
  // large one must not keep its RMA flags or descriptors.
  Seg rma;
  rma.mode = wire::kRma;
  rma.length = 1 << 20;
  const std::vector<char> big = Frame("h", {{"a"}, rma}, 5);
  const std::vector<char> small = Frame("h", {{"z"}}, 0);
  RxMsg m;
  ASSERT_TRUE(ParseMsg(big.data(), big.size(), 64, true, &m).ok());
  ASSERT_TRUE(ParseMsg(small.data(), small.size(), 64, true, &m).ok());
  EXPECT_FALSE(m.has_rma);
  ASSERT_EQ(m.segs.size(), 1u);
  EXPECT_EQ(InlineBytes(m, 0), "z");
  EXPECT_EQ(m.sender_op, 0u);
}

}  // namespace
}  // namespace ferry_fabric
