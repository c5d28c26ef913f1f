// The core's messages: what one worker says to another, and how each is
// laid out. The layout is documented in docs/protocol.md ("Wire format");
// this file is its single source of truth. Every message is an envelope
// (magic, wire version, kind, flags, sequence number) followed by a
// kind-specific body; tensors travel as transport segments after it.
//
// Decoding never trusts the wire: every Decode* returns false on a short,
// oversized or malformed body and the caller drops the message (and, before
// authentication, the connection).
#pragma once

#include "wire/codec.h"

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::wire {

constexpr uint16_t kMagic = 0x5946;  // "FY"
// Version 1 is the first; a peer whose HELLO names another version is
// refused with INCOMPATIBLE before anything else is read.
constexpr uint8_t kWireVersion = 1;
constexpr size_t kEnvelopeSize = 16;
constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;  // HMAC-SHA256

enum class Kind : uint8_t {
  kHello = 1,      // connector -> acceptor: who I am, a nonce
  kChallenge = 2,  // acceptor -> connector: my nonce, proof I hold the secret
  kAuth = 3,       // connector -> acceptor: proof I hold the secret
  kReady = 4,      // acceptor -> connector: authenticated, send away
  kReject = 5,     // either way: why this connection is refused
  kRequest = 10,   // call a function (rpc_sync/async, remote, to_here)
  kResponse = 11,  // the answer to a request
  kHeartbeat = 12,
  kControl = 13,     // an RRef control message (retried until acknowledged)
  kControlAck = 14,  // acknowledges a batch of control ids
  kGoodbye = 15,     // the sender is leaving gracefully; closing follows
  kCancel = 16,      // the caller gave up on a call it sent (idempotent)
  kStoreJoin = 20,
  kStoreJoined = 21,
  kStoreMemberEvent = 22,
  kStoreLeave = 23,
  kStoreArrive = 24,  // member -> store: reached a static job's shutdown barrier
  // A debugger (an authenticated store client that never joins) -> the
  // worker hosting the store: "the debug dump of worker <name>" (body: Str
  // name); the answer (body: I32 status, Str message, Str the JSON).
  // docs/debugging.md, "From another process".
  kDebugDump = 25,
  kDebugDumpReply = 26,
};

// Envelope flags.
constexpr uint32_t kFlagBodyInSegment0 = 1u << 0;  // body too big for header

struct Envelope {
  Kind kind = Kind::kHeartbeat;
  uint32_t flags = 0;
  uint64_t seq = 0;  // per (sender, receiver) pair; 0 = not deduplicated
};
// Writes the envelope's kEnvelopeSize bytes at `out` (the engine writes them
// into the room an OutMessage keeps in front of its body).
void EncodeEnvelopeAt(const Envelope& e, uint8_t* out);
// False when the magic or version is wrong or the header is too short.
bool DecodeEnvelope(Reader& r, Envelope* e, uint8_t* version);

// A globally unique id: the creating worker and a counter local to it.
struct Guid {
  uint64_t worker = 0;
  uint64_t local = 0;
  bool operator==(const Guid& o) const { return worker == o.worker && local == o.local; }
  bool operator<(const Guid& o) const {
    return worker != o.worker ? worker < o.worker : local < o.local;
  }
  std::string ToString() const;
};
void Put(Writer& w, const Guid& g);
void Put(Fields& f, const Guid& g);
Guid GetGuid(Reader& r);

// ---- connection set-up --------------------------------------------------
// kMemberDevice: a member's second connection, on the transport its device
// messages take (engine/peer.h); authenticated like the first.
enum class Role : uint8_t { kMember = 1, kStoreClient = 2, kMemberDevice = 3 };

struct Hello {
  uint8_t wire_version = kWireVersion;
  Role role = Role::kMember;
  std::string job;
  uint64_t id = 0;  // 0 for a store client not yet joined
  uint64_t incarnation = 0;
  std::string name;
  std::array<uint8_t, kNonceSize> nonce{};
};
struct Challenge {
  uint64_t id = 0;
  uint64_t incarnation = 0;
  std::array<uint8_t, kNonceSize> nonce{};
  std::array<uint8_t, kMacSize> mac{};
};
struct Auth {
  std::array<uint8_t, kMacSize> mac{};
};
struct Reject {
  int32_t code = 0;
  std::string message;
};
// The handshake's bodies (the engine's handshake.cc runs the exchange).
// Decode* return false on a short or malformed body; what was read before
// the failure is kept (the refusal names the peer it claimed to be).
void EncodeHello(const Hello& m, Writer& w);
bool DecodeHello(Reader& r, Hello* m);
void EncodeChallenge(const Challenge& m, Writer& w);
bool DecodeChallenge(Reader& r, Challenge* m);
void EncodeAuth(const Auth& m, Writer& w);
bool DecodeAuth(Reader& r, Auth* m);
void EncodeReject(const Reject& m, Writer& w);
bool DecodeReject(Reader& r, Reject* m);

// ---- calls ---------------------------------------------------------------
// A tensor's description; its bytes are one transport segment.
struct TensorMeta {
  DLDataType dtype{};
  DLDevice device{};
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
};
// An RRef travelling inside a call: who owns it, which RRef, which fork the
// receiver becomes, and who sent it (the fork's parent).
struct RRefRef {
  uint64_t owner = 0;
  Guid rref;
  Guid fork;
  uint64_t parent = 0;
};
struct ValueMeta {
  std::string bytes;
  std::vector<TensorMeta> tensors;
  std::vector<RRefRef> rrefs;
};
void Put(Writer& w, const ValueMeta& v);
void Put(Fields& f, const ValueMeta& v);
bool Get(Reader& r, ValueMeta* v);

enum class CallKind : uint8_t {
  kRpc = 1,     // run `function`, return its value
  kRemote = 2,  // run `function`, keep the value in OwnerRRef `rref`
  kFetch = 3,   // to_here: return a copy of OwnerRRef `rref`'s value
};
struct Request {
  uint64_t call_id = 0;
  CallKind call_kind = CallKind::kRpc;
  uint32_t timeout_ms = 0;  // what was left of the caller's deadline
  std::string function;
  Guid rref;  // kRemote, kFetch
  Guid fork;  // kRemote: the caller's UserRRef fork
  ValueMeta value;
};
void Put(Writer& w, const Request& m);
bool Get(Reader& r, Request* m);

struct Response {
  uint64_t call_id = 0;
  int32_t status = 0;
  std::string message;
  ValueMeta value;
};
void Put(Writer& w, const Response& m);
bool Get(Reader& r, Response* m);

// CANCEL: the caller of request `call_id` gave up on it (its deadline
// passed, or it cancelled the future). The callee drops the call if it has
// not started and flags it if it is running; no reply is owed beyond the
// one the call gets anyway. Idempotent: a CANCEL for a call the callee no
// longer knows is ignored. A peer that predates it ignores the kind.
enum class CancelReason : uint8_t {
  kCancelled = 1,  // Future.cancel()
  kDeadline = 2,   // the caller's deadline passed
};
struct Cancel {
  uint64_t call_id = 0;
  CancelReason reason = CancelReason::kCancelled;
};
void Put(Writer& w, const Cancel& m);
bool Get(Reader& r, Cancel* m);

// ---- RRef control (docs/protocol.md) ----------------------------------
enum class ControlKind : uint8_t {
  kForkRequest = 1,  // new user -> owner: fork `fork` of `rref` exists
  kOwnerAck = 2,     // owner -> user: your fork `fork` is confirmed
  kChildAccept = 3,  // child -> parent: owner confirmed me, let go (G2)
  kUserDelete = 4,   // user -> owner: fork `fork` was deleted (G1)
};
struct Control {
  uint64_t control_id = 0;  // unique per sender; acknowledged by kControlAck
  ControlKind kind = ControlKind::kForkRequest;
  Guid rref;
  Guid fork;
  uint64_t holder = 0;  // kForkRequest: the worker holding the fork
};
void Put(Writer& w, const Control& m);
bool Get(Reader& r, Control* m);

// ---- membership --------------------------------------------------------
struct Endpoint {
  std::string plugin;
  std::string address;
  std::string domain;
  int32_t priority = 0;
};
struct MemberRecord {
  uint64_t id = 0;
  uint64_t incarnation = 0;
  std::string name;
  uint8_t wire_version = kWireVersion;
  std::vector<Endpoint> endpoints;
  // The member's rank in a static job, -1 in an elastic one. Not part of
  // the record's own encoding: the store messages carry it after their
  // other fields (StoreJoin, StoreJoined, StoreMemberEvent below).
  int32_t rank = -1;
};
void Put(Writer& w, const MemberRecord& m);
bool Get(Reader& r, MemberRecord* m);

// STORE_JOIN: the joiner's record, then its job: world_size (0 = an
// elastic job) and rank (self.rank). A JOIN that ends after the record
// (an older worker) is an elastic one.
struct StoreJoin {
  MemberRecord self;
  uint32_t world_size = 0;
};
void Put(Writer& w, const StoreJoin& m);
bool Get(Reader& r, StoreJoin* m);

enum class MemberEventKind : uint8_t {
  kJoined = 1,
  kLeft = 2,
  kGone = 3,
  // A static job's member reached its shutdown barrier (STORE_ARRIVE).
  kArrived = 4,
};

// STORE_JOINED: status, message, self, the live members; then the job:
// world_size, self's rank, each live member's rank; in a static job the
// members that joined and are no longer alive (record, rank, state: 2 left,
// 3 gone) and the ranks that reached shutdown already.
struct StoreJoined {
  int32_t status = 0;
  std::string message;
  MemberRecord self;
  std::vector<MemberRecord> members;
  uint32_t world_size = 0;
  struct Departed {
    MemberRecord member;
    MemberEventKind state = MemberEventKind::kLeft;  // kLeft or kGone
  };
  std::vector<Departed> departed;
  std::vector<int32_t> arrived;
};
void Put(Writer& w, const StoreJoined& m);
bool Get(Reader& r, StoreJoined* m);

// STORE_MEMBER_EVENT: event u8, record, reason, then the member's rank.
struct StoreMemberEvent {
  MemberEventKind event = MemberEventKind::kJoined;
  MemberRecord member;
  std::string reason;  // kGone: why the store lost it (empty otherwise)
};
void Put(Writer& w, const StoreMemberEvent& m);
bool Get(Reader& r, StoreMemberEvent* m);

}  // namespace ferry::wire
