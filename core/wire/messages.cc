// Encoding and bounds-checked decoding of the core's messages (messages.h).
#include "wire/messages.h"

#include <cstring>

namespace ferry::wire {
namespace {

// Limits that keep a hostile peer from making us allocate without bound;
// each is far above anything legitimate.
constexpr size_t kMaxName = 4096;
constexpr size_t kMaxMessageText = 64 * 1024;
constexpr uint32_t kMaxDims = 64;

}  // namespace

void EncodeEnvelopeAt(const Envelope& e, uint8_t* out) {
  const uint16_t magic = kMagic;
  const uint8_t kind = static_cast<uint8_t>(e.kind);
  std::memcpy(out, &magic, 2);
  out[2] = kWireVersion;
  out[3] = kind;
  std::memcpy(out + 4, &e.flags, 4);
  std::memcpy(out + 8, &e.seq, 8);
  static_assert(kEnvelopeSize == 16, "the envelope's layout is docs/protocol.md's");
}

bool DecodeEnvelope(Reader& r, Envelope* e, uint8_t* version) {
  const uint16_t magic = r.U16();
  *version = r.U8();
  e->kind = static_cast<Kind>(r.U8());
  e->flags = r.U32();
  e->seq = r.U64();
  return r.ok() && magic == kMagic;
}

void EncodeHello(const Hello& m, Writer& w) {
  w.U8(m.wire_version);
  w.U8(static_cast<uint8_t>(m.role));
  w.Str(m.job);
  w.U64(m.id);
  w.U64(m.incarnation);
  w.Str(m.name);
  w.Raw(m.nonce.data(), m.nonce.size());
}

bool DecodeHello(Reader& r, Hello* m) {
  m->wire_version = r.U8();
  m->role = static_cast<Role>(r.U8());
  m->job = r.Str(kMaxName);
  m->id = r.U64();
  m->incarnation = r.U64();
  m->name = r.Str(kMaxName);
  r.Raw(m->nonce.data(), m->nonce.size());
  return r.ok() && (m->role == Role::kMember || m->role == Role::kStoreClient ||
                    m->role == Role::kMemberDevice);
}

void EncodeChallenge(const Challenge& m, Writer& w) {
  w.U64(m.id);
  w.U64(m.incarnation);
  w.Raw(m.nonce.data(), m.nonce.size());
  w.Raw(m.mac.data(), m.mac.size());
}

bool DecodeChallenge(Reader& r, Challenge* m) {
  m->id = r.U64();
  m->incarnation = r.U64();
  r.Raw(m->nonce.data(), m->nonce.size());
  r.Raw(m->mac.data(), m->mac.size());
  return r.ok();
}

void EncodeAuth(const Auth& m, Writer& w) {
  w.Raw(m.mac.data(), m.mac.size());
}

bool DecodeAuth(Reader& r, Auth* m) {
  r.Raw(m->mac.data(), m->mac.size());
  return r.ok();
}

void EncodeReject(const Reject& m, Writer& w) {
  w.I32(m.code);
  w.Str(m.message);
}

bool DecodeReject(Reader& r, Reject* m) {
  m->code = r.I32();
  m->message = r.Str(kMaxName);
  return r.ok();
}

std::string Guid::ToString() const {
  return std::to_string(worker) + ":" + std::to_string(local);
}

void Put(Writer& w, const Guid& g) {
  Fields f(w);
  Put(f, g);
}

void Put(Fields& f, const Guid& g) {
  f.U64(g.worker);
  f.U64(g.local);
}

Guid GetGuid(Reader& r) {
  Guid g;
  g.worker = r.U64();
  g.local = r.U64();
  return g;
}

namespace {

void PutTensor(Fields& f, const TensorMeta& t) {
  f.U8(t.dtype.code);
  f.U8(t.dtype.bits);
  f.U16(t.dtype.lanes);
  f.I32(static_cast<int32_t>(t.device.device_type));
  f.I32(t.device.device_id);
  f.U32(static_cast<uint32_t>(t.shape.size()));
  for (int64_t d : t.shape) f.U64(static_cast<uint64_t>(d));
  f.U64(t.nbytes);
}

bool GetTensor(Reader& r, TensorMeta* t) {
  t->dtype.code = r.U8();
  t->dtype.bits = r.U8();
  t->dtype.lanes = r.U16();
  // A device type outside DLPack's codes would be undefined behaviour
  // wherever the enum is read (the agent's routing switches on it): a peer's
  // lie is refused here, before it becomes a DLDeviceType (found by
  // fuzz/wire_fuzzer.cc; docs/fuzzing.md).
  const int32_t device_type = r.I32();
  if (device_type < kDLCPU || device_type > kDLCUDAManaged) return false;
  t->device.device_type = static_cast<DLDeviceType>(device_type);
  t->device.device_id = r.I32();
  const uint32_t ndim = r.Count(8);
  if (ndim > kMaxDims) return false;
  t->shape.resize(ndim);
  uint64_t elements = 1;
  for (auto& d : t->shape) {
    d = static_cast<int64_t>(r.U64());
    if (d < 0) return false;
    if (d != 0 && elements > UINT64_MAX / static_cast<uint64_t>(d)) return false;
    elements *= static_cast<uint64_t>(d);
  }
  t->nbytes = r.U64();
  if (!r.ok()) return false;
  // The size must be what the shape and dtype say: a receiver sizes its
  // buffer from nbytes and hands shape to the user, so they must agree.
  const uint64_t element_bits =
      static_cast<uint64_t>(t->dtype.bits) * std::max<uint16_t>(t->dtype.lanes, 1);
  if (element_bits == 0 || element_bits % 8 != 0) return false;
  const uint64_t element_bytes = element_bits / 8;
  if (elements != 0 && element_bytes > UINT64_MAX / elements) return false;
  return t->nbytes == elements * element_bytes;
}

void PutRRef(Fields& f, const RRefRef& x) {
  f.U64(x.owner);
  Put(f, x.rref);
  Put(f, x.fork);
  f.U64(x.parent);
}

void GetRRef(Reader& r, RRefRef* x) {
  x->owner = r.U64();
  x->rref = GetGuid(r);
  x->fork = GetGuid(r);
  x->parent = r.U64();
}

}  // namespace

void Put(Writer& w, const ValueMeta& v) {
  Fields f(w);
  Put(f, v);
}

void Put(Fields& f, const ValueMeta& v) {
  f.Str(v.bytes);
  f.U32(static_cast<uint32_t>(v.tensors.size()));
  for (const auto& t : v.tensors) PutTensor(f, t);
  f.U32(static_cast<uint32_t>(v.rrefs.size()));
  for (const auto& x : v.rrefs) PutRRef(f, x);
}

bool Get(Reader& r, ValueMeta* v) {
  v->bytes = std::string(r.BytesView());
  const uint32_t nt = r.Count(24);
  v->tensors.resize(nt);
  for (auto& t : v->tensors) {
    if (!GetTensor(r, &t)) return false;
  }
  const uint32_t nr = r.Count(48);
  v->rrefs.resize(nr);
  for (auto& x : v->rrefs) GetRRef(r, &x);
  return r.ok();
}

void Put(Writer& w, const Request& m) {
  Fields f(w);
  f.U64(m.call_id);
  f.U8(static_cast<uint8_t>(m.call_kind));
  f.U32(m.timeout_ms);
  f.Str(m.function);
  Put(f, m.rref);
  Put(f, m.fork);
  Put(f, m.value);
}

bool Get(Reader& r, Request* m) {
  m->call_id = r.U64();
  const uint8_t kind = r.U8();
  m->timeout_ms = r.U32();
  m->function = r.Str(kMaxName);
  m->rref = GetGuid(r);
  m->fork = GetGuid(r);
  if (!Get(r, &m->value)) return false;
  if (kind < 1 || kind > 3) return false;
  m->call_kind = static_cast<CallKind>(kind);
  return r.ok();
}

void Put(Writer& w, const Response& m) {
  Fields f(w);
  f.U64(m.call_id);
  f.I32(m.status);
  f.Str(m.message);
  Put(f, m.value);
}

bool Get(Reader& r, Response* m) {
  m->call_id = r.U64();
  m->status = r.I32();
  m->message = r.Str(kMaxMessageText);
  return Get(r, &m->value) && r.ok();
}

void Put(Writer& w, const Cancel& m) {
  Fields f(w);
  f.U64(m.call_id);
  f.U8(static_cast<uint8_t>(m.reason));
}

bool Get(Reader& r, Cancel* m) {
  m->call_id = r.U64();
  const uint8_t reason = r.U8();
  if (reason < 1 || reason > 2) return false;
  m->reason = static_cast<CancelReason>(reason);
  return r.ok();
}

void Put(Writer& w, const Control& m) {
  Fields f(w);
  f.U64(m.control_id);
  f.U8(static_cast<uint8_t>(m.kind));
  Put(f, m.rref);
  Put(f, m.fork);
  f.U64(m.holder);
}

bool Get(Reader& r, Control* m) {
  m->control_id = r.U64();
  const uint8_t kind = r.U8();
  m->rref = GetGuid(r);
  m->fork = GetGuid(r);
  m->holder = r.U64();
  if (kind < 1 || kind > 4) return false;
  m->kind = static_cast<ControlKind>(kind);
  return r.ok();
}

void Put(Writer& w, const MemberRecord& m) {
  w.U64(m.id);
  w.U64(m.incarnation);
  w.Str(m.name);
  w.U8(m.wire_version);
  w.U32(static_cast<uint32_t>(m.endpoints.size()));
  for (const auto& e : m.endpoints) {
    w.Str(e.plugin);
    w.Str(e.address);
    w.Str(e.domain);
    w.I32(e.priority);
  }
}

bool Get(Reader& r, MemberRecord* m) {
  m->id = r.U64();
  m->incarnation = r.U64();
  m->name = r.Str(kMaxName);
  m->wire_version = r.U8();
  const uint32_t n = r.Count(16);
  if (n > 64) return false;
  m->endpoints.resize(n);
  for (auto& e : m->endpoints) {
    e.plugin = r.Str(kMaxName);
    e.address = r.Str(kMaxName);
    e.domain = r.Str(kMaxName);
    e.priority = r.I32();
  }
  return r.ok();
}

void Put(Writer& w, const StoreJoin& m) {
  Put(w, m.self);
  w.U32(m.world_size);
  w.I32(m.self.rank);
}

bool Get(Reader& r, StoreJoin* m) {
  if (!Get(r, &m->self)) return false;
  m->world_size = 0;
  m->self.rank = -1;
  if (r.remaining() > 0) {  // absent: an elastic joiner of an older version
    m->world_size = r.U32();
    m->self.rank = r.I32();
  }
  return r.ok();
}

void Put(Writer& w, const StoreJoined& m) {
  w.I32(m.status);
  w.Str(m.message);
  Put(w, m.self);
  w.U32(static_cast<uint32_t>(m.members.size()));
  for (const auto& x : m.members) Put(w, x);
  w.U32(m.world_size);
  w.I32(m.self.rank);
  for (const auto& x : m.members) w.I32(x.rank);
  w.U32(static_cast<uint32_t>(m.departed.size()));
  for (const auto& d : m.departed) {
    Put(w, d.member);
    w.I32(d.member.rank);
    w.U8(static_cast<uint8_t>(d.state));
  }
  w.U32(static_cast<uint32_t>(m.arrived.size()));
  for (int32_t rank : m.arrived) w.I32(rank);
}

bool Get(Reader& r, StoreJoined* m) {
  m->status = r.I32();
  m->message = r.Str(kMaxMessageText);
  if (!Get(r, &m->self)) return false;
  const uint32_t n = r.Count(29);
  m->members.resize(n);
  for (auto& x : m->members) {
    if (!Get(r, &x)) return false;
  }
  if (r.remaining() == 0) return r.ok();  // an older store: an elastic job
  m->world_size = r.U32();
  m->self.rank = r.I32();
  for (auto& x : m->members) x.rank = r.I32();
  const uint32_t d = r.Count(30);
  m->departed.resize(d);
  for (auto& x : m->departed) {
    if (!Get(r, &x.member)) return false;
    x.member.rank = r.I32();
    const uint8_t state = r.U8();
    if (state != static_cast<uint8_t>(MemberEventKind::kLeft) &&
        state != static_cast<uint8_t>(MemberEventKind::kGone)) {
      return false;
    }
    x.state = static_cast<MemberEventKind>(state);
  }
  const uint32_t a = r.Count(4);
  m->arrived.resize(a);
  for (auto& x : m->arrived) x = r.I32();
  return r.ok();
}

void Put(Writer& w, const StoreMemberEvent& m) {
  w.U8(static_cast<uint8_t>(m.event));
  Put(w, m.member);
  w.Str(m.reason);
  w.I32(m.member.rank);
}

bool Get(Reader& r, StoreMemberEvent* m) {
  const uint8_t k = r.U8();
  if (!Get(r, &m->member) || k < 1 || k > 4) return false;
  m->reason = r.Str(64 * 1024);
  m->member.rank = r.remaining() > 0 ? r.I32() : -1;
  m->event = static_cast<MemberEventKind>(k);
  return r.ok();
}

}  // namespace ferry::wire
