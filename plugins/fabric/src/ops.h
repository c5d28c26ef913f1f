// What libfabric holds a context pointer to while an operation is in flight.
// Every such object starts with an fi_context2 (the provider's scratch space
// under FI_CONTEXT / FI_CONTEXT2 mode) followed by its kind, so a completion
// (or a completion error) finds its way back without a lookup.
//
// These objects belong to the context, never to a connection: a connection
// may be closed and freed while libfabric still owns one of its operations;
// completions then find the connection by id (HandleTable) and miss.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>

namespace ferry_fabric {

enum class OpKind : uint8_t { kRecv, kSend, kRead };

struct OpBase {
  fi_context2 fi_ctx;  // must stay the first member
  OpKind kind;
  explicit OpBase(OpKind k) : fi_ctx{}, kind(k) {}
};

inline void* AsContext(OpBase* op) {
  return &op->fi_ctx;
}
inline OpBase* FromContext(void* ctx) {
  return static_cast<OpBase*>(ctx);
}

// A pre-posted receive buffer (eager_size bytes, registered once).
struct RxBuf : OpBase {
  RxBuf() : OpBase(OpKind::kRecv) {}
  char* data = nullptr;
  void* desc = nullptr;
  bool posted = false;
};

class Peer;

// A registered bounce buffer holding one outgoing frame until libfabric has
// sent it. Owning the copy lets a message whose send failed with
// "receiver not ready" be posted again without the host's buffers.
struct TxBuf : OpBase {
  TxBuf() : OpBase(OpKind::kSend) {}
  char* data = nullptr;
  void* desc = nullptr;
  uint32_t length = 0;
  uint8_t frame_type = 0;  // wire::Type
  uint64_t conn_id = 0;    // the local connection it belongs to (0: none)
  Peer* peer = nullptr;
  TxBuf* next = nullptr;  // free list / resend list
};

struct Placement;

// One fi_read of a rendezvous placement (segments larger than
// rma_chunk_size are read in several).
struct ReadOp : OpBase {
  ReadOp() : OpBase(OpKind::kRead) {}
  Placement* placement = nullptr;
  char* local = nullptr;
  uint64_t length = 0;
  void* desc = nullptr;
  uint64_t raddr = 0;
  uint64_t key = 0;
  ReadOp* next = nullptr;  // free list / pending list
};

}  // namespace ferry_fabric
