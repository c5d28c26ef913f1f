// A peer that writes nonsense into shared memory (a bug, or malice) must not
// crash the receiver: every size, kind, count and offset read from a ring is
// checked, and a bad one breaks the connection with DATA_LOSS and a message
// that says what was wrong. The test writes into the sender's segment from
// outside, through this process's own mapping of it.
#include "shm_fixture.h"
#include "shm_layout.h"

#include <cstring>

namespace ferry_shm_test {
namespace {

using namespace ferry_shm;

class CorruptionTest : public ShmTest {
 protected:
  // Publishes a record the way a producer does, at the consumer's tail.
  static uint64_t Inject(SegmentControl* s, uint64_t pos, uint16_t kind, uint32_t len,
                         const void* body, size_t body_len) {
    uint8_t* ring = reinterpret_cast<uint8_t*>(s) + kRingOffset;
    auto* h = reinterpret_cast<RecordHeader*>(ring + (pos & (s->header.ring_size - 1)));
    h->len = len;
    h->kind = kind;
    h->flags = 0;
    if (body_len) std::memcpy(h + 1, body, body_len);
    const uint64_t next = pos + RecordSpan(body_len);
    reinterpret_cast<RecordHeader*>(ring + (next & (s->header.ring_size - 1)))->seq =
        kNoRecord;
    __atomic_store_n(&h->seq, pos, __ATOMIC_RELEASE);
    return next;
  }
  // b must break with DATA_LOSS naming the problem; a sees its peer go.
  void ExpectDataLoss(Pair* p, const std::string& words) {
    Event broken, gone;
    ASSERT_TRUE(PumpUntil({p->a.get(), p->b.get()}, [&] {
      return (broken.type || p->b->TryTake(FERRY_EV_CONN_BROKEN, &broken)) &&
             (gone.type || p->a->TryTake(FERRY_EV_CONN_BROKEN, &gone));
    })) << "no CONN_BROKEN after corrupting the ring";
    EXPECT_EQ(broken.status, FERRY_DATA_LOSS) << broken.message;
    EXPECT_NE(broken.message.find("corrupt ring"), std::string::npos) << broken.message;
    EXPECT_NE(broken.message.find(words), std::string::npos) << broken.message;
    EXPECT_EQ(gone.status, FERRY_PEER_GONE) << gone.message;
    Status st = p->b->Send(p->server, "after", {});
    EXPECT_EQ(st.code(), FERRY_DATA_LOSS) << st.ToString();
  }
};

struct Case {
  const char* name;
  uint16_t kind;
  uint32_t claimed_len;         // 0: the body's real length
  std::vector<uint64_t> words;  // the body, as 64-bit words
  const char* expect;
};

TEST_F(CorruptionTest, BadRecordsBreakWithDataLoss) {
  // SegmentDesc.length_mode: the mode in the top byte.
  const uint64_t inline_4k = 4096 | (uint64_t{kSegInline} << kSegModeShift);
  const std::vector<Case> cases = {
      {"length past the ring's end", kRecordMsg, 1u << 30, {}, "remain before the end"},
      {"unknown kind", 9, 0, {0}, "unknown kind"},
      {"too many segments", kRecordMsg, 0, {uint64_t{1000} << 32}, "segments"},
      {"inline bytes past the record",
       kRecordMsg,
       0,
       // MsgBody{0-byte header, 1 segment}, SegmentDesc{4096 inline bytes, cpu}
       {uint64_t{1} << 32, inline_4k, 1},
       "overruns"},
      {"chunk outside a message", kRecordChunk, 0, {0, 0, 0}, "does not belong"},
      {"record shorter than its layout", kRecordMsg, 0, {uint64_t{4} << 32}, "too short"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Pair p;
    ASSERT_TRUE(MakePair(&p));
    SegmentControl* s = ConnectorSegment();
    ASSERT_NE(s, nullptr) << "cannot find the connector's segment in /proc/self/maps";
    const size_t body = c.words.size() * 8;
    Inject(s, s->consumer.tail, c.kind,
           c.claimed_len ? c.claimed_len : static_cast<uint32_t>(body), c.words.data(),
           body);
    ExpectDataLoss(&p, c.expect);
    ClosePair(&p);
  }
}

TEST_F(CorruptionTest, ChunkThatDoesNotContinueItsSegment) {
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  SegmentControl* s = ConnectorSegment();
  ASSERT_NE(s, nullptr);
  // A message with one 100-byte ring-copied segment...
  const uint64_t msg[] = {uint64_t{1} << 32, 100 | (uint64_t{kSegRing} << kSegModeShift),
                          1};
  uint64_t pos = Inject(s, s->consumer.tail, kRecordMsg, sizeof msg, msg, sizeof msg);
  Event arrival;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                        [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
  std::vector<unsigned char> in(100);
  ASSERT_TRUE(p.b->PlaceAll(arrival, {in.data()}, nullptr).ok());
  // ...then a chunk claiming to be segment 5 at offset 40.
  const uint64_t chunk[] = {5, 40, 0};
  Inject(s, pos, kRecordChunk, sizeof chunk, chunk, sizeof chunk);
  Event placed;
  ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                        [&] { return p.b->TryTake(FERRY_EV_PLACE_DONE, &placed); }));
  EXPECT_EQ(placed.status, FERRY_DATA_LOSS) << placed.message;
  ExpectDataLoss(&p, "does not continue segment");
  ClosePair(&p);
}

TEST_F(CorruptionTest, ImpossibleConsumerTailIsDataLossForTheSender) {
  SetParam("cma", "0");
  Pair p;
  ASSERT_TRUE(MakePair(&p));
  SegmentControl* s = ConnectorSegment();
  ASSERT_NE(s, nullptr);
  // The consumer claims to have read far more than was ever written.
  __atomic_store_n(&s->consumer.tail, uint64_t{1} << 40, __ATOMIC_RELEASE);
  std::vector<unsigned char> big(4u << 20);
  ASSERT_TRUE(p.a->Send(p.client, "big", {{big.data(), big.size()}}).ok());
  Event broken, done;
  ASSERT_TRUE(PumpUntil({p.a.get()}, [&] {
    return (broken.type || p.a->TryTake(FERRY_EV_CONN_BROKEN, &broken)) &&
           (done.type || p.a->TryTake(FERRY_EV_SEND_DONE, &done));
  }));
  EXPECT_EQ(broken.status, FERRY_DATA_LOSS) << broken.message;
  EXPECT_NE(broken.message.find("consuming up to"), std::string::npos) << broken.message;
  EXPECT_EQ(done.status, FERRY_DATA_LOSS) << done.message;
  ClosePair(&p);
}

}  // namespace
}  // namespace ferry_shm_test
