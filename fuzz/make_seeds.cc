// Writes the seed corpus of every fuzz target (fuzz/corpus/<target>/) with
// the real encoders: the core's wire codec and handshake proofs, the tcp
// plugin's frame field encoders, a real shm RingWriter, the fabric plugin's
// MSG layout helpers. Run it again after a wire format changes:
//   cmake --build build --target fuzz-make-seeds && build/bin/fuzz-make-seeds fuzz/corpus
#include "fuzz_input.h"

#include "../plugins/fabric/src/wire.h"
#include "../plugins/shm/src/ring.h"
#include "../plugins/tcp/src/frame_parser.h"
#include "engine/auth.h"
#include "wire/messages.h"

#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using ferry_fuzz::AppendFrame;

fs::path g_root;

void Save(const std::string& target, const std::string& name, const Bytes& b) {
  fs::create_directories(g_root / target);
  std::ofstream out(g_root / target / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()),
            static_cast<std::streamsize>(b.size()));
}

// ---- core: an envelope and a body -----------------------------------------
namespace cw = ferry::wire;

template <typename F>
Bytes Message(cw::Kind kind, F body) {
  Bytes out(cw::kEnvelopeSize);
  cw::Envelope e;
  e.kind = kind;
  e.seq = 3;
  cw::EncodeEnvelopeAt(e, out.data());
  cw::Writer w(&out);
  body(w);
  return out;
}

cw::MemberRecord Record(const std::string& name, int32_t rank) {
  cw::MemberRecord r;
  r.id = 0;
  r.name = name;
  r.endpoints.push_back({"tcp", "127.0.0.1:4000", "host-a", 10});
  r.endpoints.push_back({"shm", "/tmp/ferry-" + name, "boot:ns", 20});
  r.rank = rank;
  return r;
}

cw::ValueMeta Value() {
  cw::ValueMeta v;
  v.bytes = "pickled-args";
  cw::TensorMeta t;
  t.dtype = {kDLFloat, 32, 1};
  t.device = {kDLCPU, 0};
  t.shape = {2, 3};
  t.nbytes = 24;
  v.tensors.push_back(t);
  v.rrefs.push_back({5, {5, 1}, {6, 2}, 6});
  return v;
}

void WireSeeds() {
  cw::Hello hello;
  hello.job = "fuzzjob";
  hello.id = 9;
  hello.incarnation = 1;
  hello.name = "worker-9";
  hello.nonce.fill(0x33);
  Save("wire", "hello",
       Message(cw::Kind::kHello, [&](cw::Writer& w) { EncodeHello(hello, w); }));
  cw::Challenge ch;
  ch.id = 3;
  Save("wire", "challenge",
       Message(cw::Kind::kChallenge, [&](cw::Writer& w) { EncodeChallenge(ch, w); }));
  Save("wire", "auth",
       Message(cw::Kind::kAuth, [&](cw::Writer& w) { EncodeAuth({}, w); }));
  Save("wire", "reject", Message(cw::Kind::kReject, [&](cw::Writer& w) {
         EncodeReject({5, "this is job 'a', not 'b'"}, w);
       }));
  cw::Request req;
  req.call_id = 77;
  req.call_kind = cw::CallKind::kRemote;
  req.timeout_ms = 5000;
  req.function = "update";
  req.rref = {5, 1};
  req.fork = {6, 2};
  req.value = Value();
  Save("wire", "request",
       Message(cw::Kind::kRequest, [&](cw::Writer& w) { Put(w, req); }));
  cw::Response resp;
  resp.call_id = 77;
  resp.message = "ok";
  resp.value = Value();
  Save("wire", "response",
       Message(cw::Kind::kResponse, [&](cw::Writer& w) { Put(w, resp); }));
  Save("wire", "cancel", Message(cw::Kind::kCancel, [&](cw::Writer& w) {
         Put(w, cw::Cancel{77, cw::CancelReason::kDeadline});
       }));
  cw::Control ctl;
  ctl.control_id = 4;
  ctl.kind = cw::ControlKind::kForkRequest;
  ctl.rref = {5, 1};
  ctl.fork = {6, 2};
  ctl.holder = 6;
  Save("wire", "control",
       Message(cw::Kind::kControl, [&](cw::Writer& w) { Put(w, ctl); }));
  cw::StoreJoin join{Record("w1", 0), 2};
  Save("wire", "store_join",
       Message(cw::Kind::kStoreJoin, [&](cw::Writer& w) { Put(w, join); }));
  cw::StoreJoined joined;
  joined.self = Record("w1", 0);
  joined.members = {Record("w0", 1)};
  joined.world_size = 3;
  joined.departed.push_back({Record("w2", 2), cw::MemberEventKind::kGone});
  joined.arrived = {1};
  Save("wire", "store_joined",
       Message(cw::Kind::kStoreJoined, [&](cw::Writer& w) { Put(w, joined); }));
  cw::StoreMemberEvent ev{cw::MemberEventKind::kGone, Record("w0", 1),
                          "heartbeats stopped"};
  Save("wire", "store_member_event",
       Message(cw::Kind::kStoreMemberEvent, [&](cw::Writer& w) { Put(w, ev); }));
  Save("wire", "member_record",
       Message(cw::Kind::kStoreLeave, [&](cw::Writer& w) { Put(w, Record("w5", -1)); }));
}

// ---- handshake: frames of headers against handshake_fuzzer.cc's worker ----
const std::string kJob = "fuzzjob";
const std::string kSecret = "fuzz-secret";
constexpr uint8_t kMyNonceByte = 0x5a;

void AddFrame(Bytes* in, const Bytes& frame) {
  AppendFrame(in, frame.data(), frame.size());
}

void HandshakeSeeds() {
  ferry::auth::Nonce mine;
  mine.fill(kMyNonceByte);
  ferry::auth::Nonce theirs;
  theirs.fill(0x33);
  cw::Hello hello;
  hello.job = kJob;
  hello.id = 9;
  hello.incarnation = 1;
  hello.name = "worker-9";
  hello.nonce = theirs;
  const Bytes hello_msg =
      Message(cw::Kind::kHello, [&](cw::Writer& w) { EncodeHello(hello, w); });
  cw::Auth auth;
  auth.mac = ferry::auth::ConnectorProof(kSecret, kJob, mine, theirs, 9);
  const Bytes auth_msg =
      Message(cw::Kind::kAuth, [&](cw::Writer& w) { EncodeAuth(auth, w); });
  const Bytes heartbeat = Message(cw::Kind::kHeartbeat, [](cw::Writer&) {});

  Bytes acceptor{0};  // byte 0 even: this side accepts
  AddFrame(&acceptor, hello_msg);
  AddFrame(&acceptor, hello_msg);  // a duplicate
  AddFrame(&acceptor, auth_msg);
  AddFrame(&acceptor, heartbeat);
  Save("handshake", "acceptor_ok", acceptor);

  Bytes early{0};
  AddFrame(&early, auth_msg);
  Save("handshake", "acceptor_auth_first", early);

  Bytes unauth{0};
  AddFrame(&unauth, heartbeat);
  Save("handshake", "acceptor_message_first", unauth);

  cw::Hello other = hello;
  other.job = "another-job";
  Bytes wrong_job{0};
  AddFrame(&wrong_job,
           Message(cw::Kind::kHello, [&](cw::Writer& w) { EncodeHello(other, w); }));
  Save("handshake", "acceptor_wrong_job", wrong_job);

  cw::Challenge ch;
  ch.id = 3;
  ch.incarnation = 1;
  ch.nonce = theirs;
  ch.mac = ferry::auth::AcceptorProof(kSecret, kJob, mine, theirs, 3);
  Bytes connector{1};  // byte 0 odd: this side connected
  AddFrame(&connector,
           Message(cw::Kind::kChallenge, [&](cw::Writer& w) { EncodeChallenge(ch, w); }));
  AddFrame(&connector, Message(cw::Kind::kReady, [](cw::Writer&) {}));
  AddFrame(&connector, heartbeat);
  Save("handshake", "connector_ok", connector);

  Bytes early_ready{1};
  AddFrame(&early_ready,
           Message(cw::Kind::kChallenge, [&](cw::Writer& w) { EncodeChallenge(ch, w); }));
  AddFrame(&early_ready, heartbeat);  // before READY: READY is on its way
  Save("handshake", "connector_message_before_ready", early_ready);

  Bytes rejected{1};
  AddFrame(&rejected, Message(cw::Kind::kReject, [](cw::Writer& w) {
    EncodeReject({16, "authentication failed"}, w);
  }));
  Save("handshake", "connector_rejected", rejected);
}

// ---- store: operations of store_fuzzer.cc ---------------------------------
Bytes StoreBody(const cw::StoreJoin& j) {
  Bytes b;
  cw::Writer w(&b);
  Put(w, j);
  return b;
}

void StoreOp(Bytes* in, int action, int conn, const Bytes& body = {}) {
  in->push_back(static_cast<uint8_t>((action << 2) | (conn - 1)));
  AppendFrame(in, body.data(), body.size());
}

void StoreSeeds() {
  Bytes elastic{0};
  StoreOp(&elastic, 0, 1, StoreBody({Record("a", -1), 0}));
  StoreOp(&elastic, 0, 2, StoreBody({Record("b", -1), 0}));
  StoreOp(&elastic, 0, 3, StoreBody({Record("a", -1), 0}));  // name taken
  StoreOp(&elastic, 2, 1);                                   // ARRIVE
  StoreOp(&elastic, 1, 2);                                   // LEAVE
  elastic.push_back(4 << 2 | 0);                             // conn 1 gone
  StoreOp(&elastic, 0, 4, StoreBody({Record("b", -1), 0}));  // b again
  Save("store", "elastic", elastic);

  Bytes fixed{3};  // world_size 3
  Bytes host;
  {
    cw::Writer w(&host);
    Put(w, Record("host", 0));
    host.push_back(0);  // its rank
  }
  StoreOp(&fixed, 5, 1, host);  // the hosting worker joins
  StoreOp(&fixed, 0, 1, StoreBody({Record("r1", 1), 3}));
  StoreOp(&fixed, 0, 2, StoreBody({Record("r2", 2), 3}));
  StoreOp(&fixed, 0, 3, StoreBody({Record("r9", 9), 3}));  // rank out of range
  StoreOp(&fixed, 0, 4, StoreBody({Record("r3", 1), 2}));  // wrong world size
  StoreOp(&fixed, 2, 1);
  StoreOp(&fixed, 2, 2);
  fixed.push_back(6 << 2);  // the host arrives
  fixed.push_back(1);
  StoreOp(&fixed, 1, 2);
  Save("store", "static", fixed);
}

// ---- tcp: a hello and message frames --------------------------------------
namespace tw = ferry_tcp::wire;

void TcpFrame(Bytes* out, const std::string& header,
              const std::vector<std::pair<std::string, bool>>& segs) {
  tw::Prefix p;
  p.header_len = static_cast<uint32_t>(header.size());
  p.num_segments = static_cast<uint32_t>(segs.size());
  for (const auto& s : segs) p.payload_bytes += s.first.size();
  char prefix[tw::kPrefixSize];
  tw::EncodePrefix(p, prefix);
  out->insert(out->end(), prefix, prefix + sizeof prefix);
  for (const auto& s : segs) {
    tw::SegmentEntry e;
    e.length = s.first.size();
    e.device_type = 1;  // kDLCPU
    e.flags = s.second ? tw::kSegmentInline : 0;
    char entry[tw::kSegmentEntrySize];
    tw::EncodeSegment(e, entry);
    out->insert(out->end(), entry, entry + sizeof entry);
  }
  out->insert(out->end(), header.begin(), header.end());
  for (const auto& s : segs) {
    if (s.second) out->insert(out->end(), s.first.begin(), s.first.end());
  }
  for (const auto& s : segs) {
    if (!s.second) out->insert(out->end(), s.first.begin(), s.first.end());
  }
}

void TcpSeeds() {
  for (int small = 0; small < 2; ++small) {
    Bytes in{static_cast<uint8_t>(small)};
    // The hello a default tcp context announces.
    const tw::Hello h = ferry_tcp::HelloOf(ferry_tcp::LimitsOf(ferry_tcp::Config{}));
    char hello[tw::kHelloSize];
    tw::EncodeHello(h, hello);
    in.insert(in.end(), hello, hello + sizeof hello);
    TcpFrame(&in, "a-core-header", {});
    TcpFrame(&in, "hdr", {{"inline-bytes", true}, {std::string(100, 'x'), false}});
    TcpFrame(&in, "", {{"one", true}, {"two", true}, {std::string(40, 'y'), false}});
    Save("tcp_frame", small ? "hello_messages_small_limits" : "hello_messages", in);
  }
}

// ---- shm: rings a real RingWriter filled ----------------------------------
namespace fs_shm = ferry_shm;

struct InlineSeg {
  std::string bytes;
  uint32_t mode = fs_shm::kSegInline;
  uint64_t length = 0;  // kSegRing / kSegCma
};

void WriteMessage(fs_shm::RingWriter* w, const std::string& header,
                  const std::vector<InlineSeg>& segs) {
  fs_shm::MsgBody mb{static_cast<uint32_t>(header.size()),
                     static_cast<uint16_t>(segs.size()), 0};
  for (const auto& s : segs) mb.num_cma += s.mode == fs_shm::kSegCma;
  uint64_t len = sizeof mb + segs.size() * sizeof(fs_shm::SegmentDesc) + mb.num_cma * 8 +
                 fs_shm::AlignUp(header.size(), 8);
  for (const auto& s : segs) {
    if (s.mode == fs_shm::kSegInline) len += fs_shm::AlignUp(s.bytes.size(), 8);
  }
  ferry_shm::Status st;
  uint8_t* p = w->Reserve(len, &st);
  if (p == nullptr) return;
  std::memset(p, 0, len);
  std::memcpy(p, &mb, sizeof mb);
  uint8_t* at = p + sizeof mb;
  for (const auto& s : segs) {
    const uint64_t length = s.mode == fs_shm::kSegInline ? s.bytes.size() : s.length;
    fs_shm::SegmentDesc d{length | uint64_t{s.mode} << fs_shm::kSegModeShift, 1, 0};
    std::memcpy(at, &d, sizeof d);
    at += sizeof d;
  }
  for (const auto& s : segs) {
    if (s.mode != fs_shm::kSegCma) continue;
    const uint64_t addr = 0x7f0000001000;
    std::memcpy(at, &addr, 8);
    at += 8;
  }
  std::memcpy(at, header.data(), header.size());
  at += fs_shm::AlignUp(header.size(), 8);
  for (const auto& s : segs) {
    if (s.mode != fs_shm::kSegInline) continue;
    std::memcpy(at, s.bytes.data(), s.bytes.size());
    at += fs_shm::AlignUp(s.bytes.size(), 8);
  }
  w->Commit(fs_shm::kRecordMsg);
}

void WriteChunk(fs_shm::RingWriter* w, uint32_t segment, const std::string& bytes) {
  ferry_shm::Status st;
  uint8_t* p = w->Reserve(sizeof(fs_shm::ChunkBody) + bytes.size(), &st);
  if (p == nullptr) return;
  fs_shm::ChunkBody c{segment, 0, 0};
  std::memcpy(p, &c, sizeof c);
  std::memcpy(p + sizeof c, bytes.data(), bytes.size());
  w->Commit(fs_shm::kRecordChunk);
}

void ShmSeeds() {
  constexpr uint64_t kRing = 4096;  // shm_ring_fuzzer.cc's ring
  for (int variant = 0; variant < 3; ++variant) {
    alignas(fs_shm::kRecordAlign) static uint8_t ring[kRing];
    std::memset(ring, 0, sizeof ring);
    fs_shm::ConsumerLine consumer{};
    fs_shm::RingWriter w;
    w.Init(ring, kRing, &consumer);
    if (variant == 0) {
      WriteMessage(&w, "hdr", {});
      WriteMessage(&w, "a-header", {{"inline", fs_shm::kSegInline, 0}});
    } else if (variant == 1) {
      WriteMessage(&w, "h", {{"in", fs_shm::kSegInline, 0}, {"", fs_shm::kSegRing, 40}});
      WriteChunk(&w, 1, std::string(40, 'r'));
      WriteMessage(&w, "cma",
                   {{"", fs_shm::kSegCma, 1 << 20}, {"x", fs_shm::kSegInline, 0}});
    } else {
      // Records up to the end of the ring, then a pad.
      for (int i = 0; i < 40; ++i) WriteMessage(&w, std::string(100, 'h'), {});
    }
    Save("shm_ring", "ring" + std::to_string(variant), Bytes(ring, ring + kRing));
  }
}

// ---- fabric: MSG frames ---------------------------------------------------
namespace fw = ferry_fabric::wire;

Bytes FabricMsg(uint64_t op_id, const std::string& header,
                const std::vector<std::pair<std::string, uint8_t>>& segs) {
  Bytes f{1};  // byte 0: this side has RMA
  auto put = [&f](const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    f.insert(f.end(), c, c + n);
  };
  const fw::Msg m = fw::MakeMsg(42, 7, op_id, static_cast<uint32_t>(header.size()),
                                static_cast<uint16_t>(segs.size()));
  put(&m, sizeof m);
  for (const auto& s : segs) {
    const fw::SegEntry e = fw::MakeSegEntry(s.first.size(), 1, 0, s.second);
    put(&e, sizeof e);
  }
  for (const auto& s : segs) {
    if (s.second != fw::kRma) continue;
    const fw::RemoteEntry r{0x1000, 0x77};
    put(&r, sizeof r);
  }
  put(header.data(), header.size());
  for (const auto& s : segs) {
    if (s.second == fw::kInline) put(s.first.data(), s.first.size());
  }
  return f;
}

void FabricSeeds() {
  Save("fabric_msg", "inline",
       FabricMsg(0, "hdr", {{"abc", fw::kInline}, {"", fw::kInline}}));
  Save("fabric_msg", "rma",
       FabricMsg(5, "hdr", {{"small", fw::kInline}, {std::string(64, 'r'), fw::kRma}}));
  Save("fabric_msg", "stream",
       FabricMsg(6, "", {{std::string(64, 's'), fw::kStream}, {"x", fw::kInline}}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir, e.g. fuzz/corpus>\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  WireSeeds();
  HandshakeSeeds();
  StoreSeeds();
  TcpSeeds();
  ShmSeeds();
  FabricSeeds();
  std::printf("seeds written under %s\n", argv[1]);
  return 0;
}
