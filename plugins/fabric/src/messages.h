// The plugin's bookkeeping for messages in both directions, each pooled by
// the context so steady traffic allocates nothing:
//   SendOp     a send() that could not complete at once (queued behind
//              others, before CONNECTED, or waiting for the peer: FIN after
//              an RMA read, CTS before streaming);
//   RxMsg      an arrived MSG from its receive until the host answers it;
//   Placement  a place() whose bytes are still moving (RMA reads, stream).
#pragma once

#include "ops.h"
#include "registration.h"
#include "wire.h"

#include <ferry/transport.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry_fabric {

class Conn;

// A host segment as the plugin keeps it until SEND_DONE.
struct SegRef {
  const char* data = nullptr;
  uint64_t length = 0;
  ferry_device_t device{FERRY_DEVICE_CPU, 0};
  HostMr* mr = nullptr;  // the host's registration, when it gave one
  uint8_t mode = wire::kInline;
};

struct SendOp {
  enum class State : uint8_t { kQueued, kAwaitFin, kAwaitCts, kStreaming };

  uint64_t id = 0;  // in the context's send-op table while waiting
  Conn* conn = nullptr;
  void* user_data = nullptr;
  State state = State::kQueued;
  std::vector<char> header;  // copied: the host may reuse it on return
  std::vector<SegRef> segs;
  bool has_bulk = false;  // some segment is kRma or kStream
  // kRma: what the peer reads from, and registrations made for this send.
  std::vector<wire::RemoteEntry> remote;
  std::vector<OpRegistration> regs;
  // kStreaming: which segments the receiver wants and how far we got.
  uint64_t want_mask = 0;
  uint64_t stream_id = 0;
  uint32_t stream_seg = 0;
  uint64_t stream_off = 0;
  SendOp* next = nullptr;  // free list

  void Reset() {
    id = 0;
    conn = nullptr;
    user_data = nullptr;
    state = State::kQueued;
    header.clear();
    segs.clear();
    has_bulk = false;
    remote.clear();
    regs.clear();
    want_mask = 0;
    stream_id = 0;
    stream_seg = 0;
    stream_off = 0;
  }
};

// A non-inline segment of an arrival: what the sender offered.
struct BulkSeg {
  uint8_t mode = wire::kRma;
  uint64_t length = 0;
  wire::RemoteEntry remote{0, 0};
};

struct RxMsg {
  RxBuf* buf = nullptr;     // the receive buffer holding the frame, or
  std::vector<char> spill;  // its copy, when buffers ran low
  uint32_t seq = 0;
  uint64_t sender_op = 0;
  const char* header = nullptr;
  uint32_t header_len = 0;
  std::vector<ferry_arrival_segment_t> segs;
  std::vector<BulkSeg> bulk;  // one per segment (mode kInline: unused)
  bool has_rma = false;
  bool has_stream = false;
  uint64_t msg_id = 0;
  RxMsg* next = nullptr;  // free list
};

struct Placement {
  uint64_t id = 0;  // in the context's placement table (stream routing)
  uint64_t conn_id = 0;
  Conn* conn = nullptr;
  void* user_data = nullptr;
  uint64_t sender_op = 0;
  bool stream = false;
  bool cancelled = false;  // the host closed the connection meanwhile
  ferry_status_t status = FERRY_OK;
  std::string message;
  // RMA: reads not yet posted + reads in flight.
  uint32_t reads_pending = 0;
  uint32_t reads_in_flight = 0;
  std::vector<OpRegistration> regs;
  // Stream: destinations by segment index.
  struct Dest {
    char* data = nullptr;
    uint64_t length = 0;
  };
  std::vector<Dest> dests;
  uint64_t want_mask = 0;
  uint64_t bytes_expected = 0;
  uint64_t bytes_received = 0;
  Placement* next = nullptr;  // free list

  void Fail(ferry_status_t s, std::string m) {
    if (status == FERRY_OK) {
      status = s;
      message = std::move(m);
    }
  }
};

struct Listener {
  static constexpr uint32_t kMagic = 0x4c424146;  // "FABL"
  uint32_t magic = kMagic;
  class Context* ctx = nullptr;
  uint64_t id = 0;
  void* user_data = nullptr;
  std::string address;
};

}  // namespace ferry_fabric
