// The ferry-fabric wire protocol, version 1: what travels in the messages of
// the context's RDM endpoint. Every frame lands in one of the receiver's
// pre-posted receive buffers (eager_size bytes), starts with a Head naming
// the receiver's connection, and is little-endian in host layout (the
// structs are copied with memcpy; a big-endian host fails to compile).
//
//   CONNECT     connector -> listener's endpoint: "open a connection on
//               listener L; I am conn C at this endpoint name". Carries the
//               connector's receive limits.
//   ACCEPT      listener -> connector: "conn C is paired with my conn S",
//               plus the acceptor's limits. Only then may C send messages.
//   REJECT      listener -> connector: no such listener / incompatible.
//   MSG         one ferry message: seq (per-connection order), the header,
//               a table of segments; small segments inline (eager), large
//               ones either as an RMA descriptor (raddr, key) the receiver
//               reads from (rendezvous) or announced for streaming.
//   FIN         receiver -> sender: "I am done with message op O" (read it,
//               or dropped it): the sender's SEND_DONE fires, its
//               per-operation registrations are released.
//   CTS         receiver -> sender (fallback without RMA): "stream op O's
//               segments in mask M to my stream S" (M = 0: dropped).
//   DATA        sender -> receiver (fallback): a slice of a streamed segment.
//   DISCONNECT  "I closed; I will not read your memory any more; I posted
//               `final_seq` messages": the peer delivers what is still in
//               flight below final_seq, then breaks the connection.
//   DISCONNECT_ACK  answer to DISCONNECT, sent once the answering side's own
//               reads of the closer's memory have completed, so the closer
//               may release memory it exposed for RMA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the ferry-fabric wire format is little-endian host layout");

namespace ferry_fabric::wire {

constexpr uint8_t kVersion = 1;

enum Type : uint8_t {
  kConnect = 1,
  kAccept = 2,
  kReject = 3,
  kMsg = 4,
  kFin = 5,
  kCts = 6,
  kData = 7,
  kDisconnect = 8,
  kDisconnectAck = 9,
};

struct Head {
  uint8_t type;
  uint8_t version;
  uint16_t flags;
  uint32_t aux;  // MSG: seq; DISCONNECT: final_seq; otherwise 0
  uint64_t dst;  // the receiving side's connection id (0 for CONNECT)
};
static_assert(sizeof(Head) == 16, "wire layout");

// Receive limits each side announces (CONNECT / ACCEPT).
struct Limits {
  uint32_t eager_size;  // its receive buffer size: no frame may be larger
  uint32_t max_header;
  uint32_t max_segments;
  uint32_t max_inline;
  uint32_t flags;  // kLimitRma: it can read by RMA (and expose)
  uint32_t reserved;
};
static_assert(sizeof(Limits) == 24, "wire layout");
constexpr uint32_t kLimitRma = 1;

struct Connect {
  Head head;
  uint64_t listener_id;
  uint64_t src_conn;
  Limits limits;
  uint32_t name_len;  // the connector's endpoint name follows
  uint32_t reserved;
};
static_assert(sizeof(Connect) == 64, "wire layout");

struct Accept {
  Head head;  // dst = the connector's conn id
  uint64_t src_conn;
  Limits limits;
};
static_assert(sizeof(Accept) == 48, "wire layout");

struct Reject {
  Head head;  // dst = the connector's conn id
  int32_t status;
  uint32_t text_len;  // the reason follows
};
static_assert(sizeof(Reject) == 24, "wire layout");

// MSG: Msg, num_segments SegEntry, one RemoteEntry per kRma segment (in
// segment order), header bytes, then the inline segments' bytes in segment
// order.
struct Msg {
  Head head;       // aux = seq
  uint64_t op_id;  // sender's op for FIN/CTS; 0 when every segment is inline
  uint32_t header_len;
  uint16_t num_segments;
  uint16_t reserved;
};
static_assert(sizeof(Msg) == 32, "wire layout");

enum SegMode : uint8_t { kInline = 0, kRma = 1, kStream = 2 };

struct SegEntry {
  uint64_t length;
  int32_t device_type;
  uint16_t device_id;
  uint8_t mode;  // SegMode
  uint8_t reserved;
};
static_assert(sizeof(SegEntry) == 16, "wire layout");

struct RemoteEntry {
  uint64_t addr;  // virtual address, or offset into the registration
  uint64_t key;
};
static_assert(sizeof(RemoteEntry) == 16, "wire layout");

struct Fin {
  Head head;  // dst = the sender's conn id
  uint64_t op_id;
  int32_t status;  // FERRY_OK: read (or dropped by the receiver's choice)
  uint32_t reserved;
};
static_assert(sizeof(Fin) == 32, "wire layout");

struct Cts {
  Head head;  // dst = the sender's conn id
  uint64_t op_id;
  uint64_t want_mask;  // bit i: stream segment i (max_segments <= 64)
  uint64_t stream_id;  // the receiver's placement, named in every DATA
};
static_assert(sizeof(Cts) == 40, "wire layout");

struct Data {
  Head head;  // dst = the receiver's conn id
  uint64_t stream_id;
  uint64_t offset;  // within the segment
  uint32_t segment;
  uint32_t length;  // bytes that follow
};
static_assert(sizeof(Data) == 40, "wire layout");

// Largest fixed part of any control frame a receiver must accept before it
// knows the peer's limits (CONNECT with a long endpoint name).
constexpr size_t kMaxNameLen = 1024;
constexpr size_t kMinEagerSize = 4096;

inline Head MakeHead(Type type, uint64_t dst, uint32_t aux = 0) {
  Head h;
  h.type = type;
  h.version = kVersion;
  h.flags = 0;
  h.aux = aux;
  h.dst = dst;
  return h;
}

// A MSG frame's fixed part: `seq` on connection `dst`; op_id 0 when every
// segment is inline.
inline Msg MakeMsg(uint64_t dst, uint32_t seq, uint64_t op_id, uint32_t header_len,
                   uint16_t num_segments) {
  Msg m;
  m.head = MakeHead(kMsg, dst, seq);
  m.op_id = op_id;
  m.header_len = header_len;
  m.num_segments = num_segments;
  m.reserved = 0;
  return m;
}

inline SegEntry MakeSegEntry(uint64_t length, int32_t device_type, uint16_t device_id,
                             uint8_t mode) {
  SegEntry e;
  e.length = length;
  e.device_type = device_type;
  e.device_id = device_id;
  e.mode = mode;
  e.reserved = 0;
  return e;
}

// Copies a struct out of a received frame (alignment-safe). False when the
// frame is too short.
template <typename T>
inline bool Read(const char* frame, size_t len, T* out) {
  if (len < sizeof(T)) return false;
  std::memcpy(out, frame, sizeof(T));
  return true;
}

}  // namespace ferry_fabric::wire
