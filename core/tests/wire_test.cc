// The core's wire format as docs/protocol.md states it: exact bytes for the
// envelope and a request (two workers built from different ferry versions
// must agree on them), round trips of every call-path message with values
// that exercise each field, and decoding that fails cleanly on truncated or
// lying input instead of reading past the end.
#include "wire/messages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::wire {
namespace {

// Little-endian helpers for the expected bytes, written independently of
// the codec under test.
void Le(std::vector<uint8_t>* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void LeStr(std::vector<uint8_t>* out, const std::string& s) {
  Le(out, s.size(), 4);
  out->insert(out->end(), s.begin(), s.end());
}

TEST(WireTest, EnvelopeIsTheSixteenBytesTheProtocolPageLists) {
  Envelope e;
  e.kind = Kind::kResponse;
  e.flags = kFlagBodyInSegment0;
  e.seq = 0x1122334455667788ull;
  // Written in place: a guard byte after the room shows it writes no more.
  std::vector<uint8_t> got(kEnvelopeSize + 1, 0xAA);
  EncodeEnvelopeAt(e, got.data());
  EXPECT_EQ(got.back(), 0xAA) << "the envelope is longer than kEnvelopeSize";
  got.pop_back();
  std::vector<uint8_t> want;
  Le(&want, kMagic, 2);
  Le(&want, kWireVersion, 1);
  Le(&want, static_cast<uint8_t>(Kind::kResponse), 1);
  Le(&want, kFlagBodyInSegment0, 4);
  Le(&want, 0x1122334455667788ull, 8);
  ASSERT_EQ(got.size(), kEnvelopeSize);
  EXPECT_EQ(got, want);
}

TEST(WireTest, RequestBytesFollowTheDocumentedLayout) {
  Request m;
  m.call_id = 0x0102030405060708ull;
  m.call_kind = CallKind::kRemote;
  m.timeout_ms = 30000;
  m.function = "noop";
  m.rref = {7, 8};
  m.fork = {9, 10};
  m.value.bytes = "ab";
  std::vector<uint8_t> got;
  Writer w(&got);
  Put(w, m);
  std::vector<uint8_t> want;
  Le(&want, m.call_id, 8);
  Le(&want, 2, 1);
  Le(&want, 30000, 4);
  LeStr(&want, "noop");
  Le(&want, 7, 8);
  Le(&want, 8, 8);
  Le(&want, 9, 8);
  Le(&want, 10, 8);
  LeStr(&want, "ab");
  Le(&want, 0, 4);  // tensors
  Le(&want, 0, 4);  // RRefs
  EXPECT_EQ(got, want);
}

// A value with every part present, strings on both sides of the encoder's
// short-string batching, and more fixed fields than one batch holds.
ValueMeta RichValue() {
  ValueMeta v;
  v.bytes = std::string(300, 'x') + "end";
  for (int i = 0; i < 3; ++i) {
    TensorMeta t;
    t.dtype = DLDataType{kDLFloat, 32, 1};
    t.device = DLDevice{kDLCPU, 0};
    t.shape = {2, 3, static_cast<int64_t>(i + 1)};
    t.nbytes = 4ull * 2 * 3 * static_cast<uint64_t>(i + 1);
    v.tensors.push_back(t);
  }
  for (uint64_t i = 0; i < 4; ++i) {
    v.rrefs.push_back(RRefRef{10 + i, Guid{1, 100 + i}, Guid{2, 200 + i}, 20 + i});
  }
  return v;
}

void ExpectSameValue(const ValueMeta& a, const ValueMeta& b) {
  EXPECT_EQ(a.bytes, b.bytes);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_EQ(a.tensors[i].nbytes, b.tensors[i].nbytes);
    EXPECT_EQ(a.tensors[i].dtype.bits, b.tensors[i].dtype.bits);
  }
  ASSERT_EQ(a.rrefs.size(), b.rrefs.size());
  for (size_t i = 0; i < a.rrefs.size(); ++i) {
    EXPECT_EQ(a.rrefs[i].owner, b.rrefs[i].owner);
    EXPECT_EQ(a.rrefs[i].rref, b.rrefs[i].rref);
    EXPECT_EQ(a.rrefs[i].fork, b.rrefs[i].fork);
    EXPECT_EQ(a.rrefs[i].parent, b.rrefs[i].parent);
  }
}

// Encodes `m` and decodes it into `back`: true when that succeeded and
// consumed every byte.
template <typename M>
bool RoundTrip(const M& m, M* back) {
  std::vector<uint8_t> buf;
  Writer w(&buf);
  Put(w, m);
  Reader r(buf.data(), buf.size());
  return Get(r, back) && r.remaining() == 0;
}

TEST(WireTest, RequestSurvivesARoundTrip) {
  for (const std::string& function :
       {std::string(), std::string("f"), std::string(64, 'g'), std::string(65, 'h'),
        std::string(4000, 'i')}) {
    SCOPED_TRACE(function.size());
    Request req;
    req.call_id = 42;
    req.call_kind = CallKind::kFetch;
    req.timeout_ms = 1;
    req.function = function;
    req.rref = {3, 4};
    req.fork = {5, 6};
    req.value = RichValue();
    Request back;
    ASSERT_TRUE(RoundTrip(req, &back));
    EXPECT_EQ(back.call_id, 42u);
    EXPECT_EQ(back.call_kind, CallKind::kFetch);
    EXPECT_EQ(back.function, function);
    EXPECT_EQ(back.rref, (Guid{3, 4}));
    EXPECT_EQ(back.fork, (Guid{5, 6}));
    ExpectSameValue(back.value, req.value);
  }
}

TEST(WireTest, ResponseAndControlSurviveARoundTrip) {
  Response resp;
  resp.call_id = 7;
  resp.status = -3;
  resp.message = "the handler failed: " + std::string(100, 'm');
  resp.value = RichValue();
  Response back;
  ASSERT_TRUE(RoundTrip(resp, &back));
  EXPECT_EQ(back.status, -3);
  EXPECT_EQ(back.message, resp.message);
  ExpectSameValue(back.value, resp.value);

  Control c;
  c.control_id = 99;
  c.kind = ControlKind::kUserDelete;
  c.rref = {1, 2};
  c.fork = {3, 4};
  c.holder = 5;
  Control cback;
  ASSERT_TRUE(RoundTrip(c, &cback));
  EXPECT_EQ(cback.control_id, 99u);
  EXPECT_EQ(cback.kind, ControlKind::kUserDelete);
  EXPECT_EQ(cback.fork, (Guid{3, 4}));
  EXPECT_EQ(cback.holder, 5u);
}

TEST(WireTest, CancelSurvivesARoundTripAndRefusesAnUnknownReason) {
  Cancel c;
  c.call_id = 42;
  c.reason = CancelReason::kDeadline;
  Cancel back;
  ASSERT_TRUE(RoundTrip(c, &back));
  EXPECT_EQ(back.call_id, 42u);
  EXPECT_EQ(back.reason, CancelReason::kDeadline);
  std::vector<uint8_t> bytes;
  {
    Writer w(&bytes);
    Put(w, c);
  }
  bytes.back() = 9;  // no such reason
  Reader r(bytes.data(), bytes.size());
  EXPECT_FALSE(Get(r, &back));
}

// Every proper prefix of a valid request is a message cut short: decoding
// it must fail, never read past the end (ASan checks that part).
TEST(WireTest, EveryTruncatedRequestIsRefused) {
  Request req;
  req.call_id = 1;
  req.function = "f";
  req.value = RichValue();
  std::vector<uint8_t> buf;
  Writer w(&buf);
  Put(w, req);
  for (size_t n = 0; n < buf.size(); ++n) {
    std::vector<uint8_t> cut(buf.begin(), buf.begin() + static_cast<long>(n));
    Reader r(cut.data(), cut.size());
    Request back;
    EXPECT_FALSE(Get(r, &back))
        << "a request cut to " << n << " of " << buf.size() << " bytes decoded";
  }
}

TEST(WireTest, ACountLargerThanTheMessageFailsBeforeAllocating) {
  std::vector<uint8_t> buf;
  Le(&buf, 0, 4);           // value bytes: empty
  Le(&buf, 0xFFFFFFFF, 4);  // tensors: four billion, in a 12-byte message
  Le(&buf, 0, 4);
  Reader r(buf.data(), buf.size());
  ValueMeta v;
  EXPECT_FALSE(Get(r, &v));
  EXPECT_TRUE(v.tensors.empty());
}

// Found by fuzz/wire_fuzzer.cc (fuzz/regressions/wire/): a device type no
// DLPack device has, read into a DLDeviceType, was undefined behaviour.
TEST(WireTest, ATensorOnADeviceDLPackDoesNotHaveIsRefused) {
  for (int64_t device_type : {0, 14, 0x1000000, -1}) {
    SCOPED_TRACE(device_type);
    std::vector<uint8_t> buf;
    Le(&buf, 0, 4);         // value bytes: empty
    Le(&buf, 1, 4);         // one tensor
    Le(&buf, kDLFloat, 1);  // dtype code
    Le(&buf, 32, 1);        // bits
    Le(&buf, 1, 2);         // lanes
    Le(&buf, static_cast<uint32_t>(device_type), 4);
    Le(&buf, 0, 4);  // device id
    Le(&buf, 1, 4);  // ndim
    Le(&buf, 1, 8);  // shape
    Le(&buf, 4, 8);  // nbytes
    Le(&buf, 0, 4);  // rrefs: none
    Reader r(buf.data(), buf.size());
    ValueMeta v;
    EXPECT_FALSE(Get(r, &v));
  }
  std::vector<uint8_t> ok;
  Writer w(&ok);
  ValueMeta managed;
  TensorMeta t;
  t.dtype = {kDLFloat, 32, 1};
  t.device = {kDLCUDAManaged, 0};
  t.shape = {1};
  t.nbytes = 4;
  managed.tensors.push_back(t);
  Put(w, managed);
  Reader r(ok.data(), ok.size());
  ValueMeta back;
  EXPECT_TRUE(Get(r, &back));
}

// The store messages of a static job carry the job (world_size, ranks,
// departed members, arrivals) after the fields an older worker reads, so
// each side reads the other's older form as an elastic job.
MemberRecord Record(uint64_t id, const std::string& name, int32_t rank) {
  MemberRecord m;
  m.id = id;
  m.incarnation = 1;
  m.name = name;
  m.endpoints.push_back(Endpoint{"tcp", "127.0.0.1:1", "", 10});
  m.rank = rank;
  return m;
}

TEST(WireTest, StoreMessagesCarryTheStaticJob) {
  std::vector<uint8_t> buf;
  Writer w(&buf);
  StoreJoin join{Record(0, "w1", 1), 3};
  Put(w, join);
  Reader r(buf.data(), buf.size());
  StoreJoin join_back;
  ASSERT_TRUE(Get(r, &join_back));
  EXPECT_EQ(join_back.world_size, 3u);
  EXPECT_EQ(join_back.self.rank, 1);
  EXPECT_EQ(join_back.self.name, "w1");

  StoreJoined joined;
  joined.self = Record(2, "w1", 1);
  joined.members = {Record(1, "w0", 0)};
  joined.world_size = 3;
  joined.departed = {{Record(3, "w2", 2), MemberEventKind::kGone}};
  joined.arrived = {2};
  buf.clear();
  Put(w, joined);
  Reader r2(buf.data(), buf.size());
  StoreJoined back;
  ASSERT_TRUE(Get(r2, &back));
  EXPECT_EQ(back.world_size, 3u);
  EXPECT_EQ(back.self.rank, 1);
  ASSERT_EQ(back.members.size(), 1u);
  EXPECT_EQ(back.members[0].rank, 0);
  ASSERT_EQ(back.departed.size(), 1u);
  EXPECT_EQ(back.departed[0].member.name, "w2");
  EXPECT_EQ(back.departed[0].member.rank, 2);
  EXPECT_EQ(back.departed[0].state, MemberEventKind::kGone);
  EXPECT_EQ(back.arrived, std::vector<int32_t>{2});
  // No truncation reads past the end (one cut right after the live members
  // reads as an older store's elastic answer; every other cut fails).
  for (size_t n = 1; n < buf.size(); ++n) {
    Reader t(buf.data(), buf.size() - n);
    StoreJoined x;
    const bool ok = Get(t, &x);
    if (ok) {
      EXPECT_EQ(x.world_size, 0u) << "cut " << n;
    }
  }

  StoreMemberEvent ev{MemberEventKind::kArrived, Record(3, "w2", 2), ""};
  buf.clear();
  Put(w, ev);
  Reader r3(buf.data(), buf.size());
  StoreMemberEvent ev_back;
  ASSERT_TRUE(Get(r3, &ev_back));
  EXPECT_EQ(ev_back.event, MemberEventKind::kArrived);
  EXPECT_EQ(ev_back.member.rank, 2);
}

TEST(WireTest, OlderStoreMessagesReadAsAnElasticJob) {
  // What a worker before static jobs wrote: the record alone.
  std::vector<uint8_t> buf;
  Writer w(&buf);
  Put(w, Record(0, "old", -1));
  Reader r(buf.data(), buf.size());
  StoreJoin join;
  ASSERT_TRUE(Get(r, &join));
  EXPECT_EQ(join.world_size, 0u);
  EXPECT_EQ(join.self.rank, -1);
  // A member event without the rank.
  buf.clear();
  w.U8(static_cast<uint8_t>(MemberEventKind::kLeft));
  Put(w, Record(4, "old", -1));
  w.Str("");
  Reader r2(buf.data(), buf.size());
  StoreMemberEvent ev;
  ASSERT_TRUE(Get(r2, &ev));
  EXPECT_EQ(ev.event, MemberEventKind::kLeft);
  EXPECT_EQ(ev.member.rank, -1);
}

}  // namespace
}  // namespace ferry::wire
