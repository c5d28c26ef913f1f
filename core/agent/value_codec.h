// ferry::ValueCodec: a Value into a message for one member, and back. The
// bytes and the tensors' descriptions go into the body's wire::ValueMeta,
// the tensors' memory travels as the message's segments (zero-copy: the
// message takes the tensors over), and each RRef is forked for the
// destination through the RRef context (the forks are returned, so a
// message that is never sent can undo them).
//
// Tensors live in host memory or CUDA device memory. A device tensor keeps
// its device end to end: sent from its own memory after the value's stream
// (the engine routes the message over a device transport, or stages it
// through host memory); received into device memory from the worker's
// device allocator, or, when it came staged, copied there from host
// memory. A worker with nothing that can read device memory refuses device
// tensors at once (FAILED_PRECONDITION); one that can send none but
// receives one staged delivers it in host memory, with a warning.
#pragma once

#include "common/status.h"
#include "engine/device_memory.h"
#include "engine/engine.h"
#include "engine/message.h"
#include "rref/rref_context.h"
#include "wire/messages.h"
#include "wire/value.h"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ferry {

class ValueCodec {
 public:
  // `engine`: what can carry device memory, and the device memory services
  // received tensors are placed with (NULL: host memory only).
  ValueCodec(RRefContext& rrefs, const Engine* engine) : rrefs_(rrefs), engine_(engine) {}

  // Encodes `v` for member `to` into `msg` (tensors move into it, RRefs are
  // forked into `forks`); `meta` receives the description and, once
  // everything checked out, `v`'s bytes (moved, not copied).
  Status Encode(Value& v, uint64_t to, wire::ValueMeta* meta, OutMessage* msg,
                std::vector<wire::RRefRef>* forks);
  // The same for a value an owner keeps (an RRef's value being fetched):
  // sent without a copy, the message keeping `v` alive until its bytes left.
  Status EncodeShared(const std::shared_ptr<Value>& v, uint64_t to, wire::ValueMeta* meta,
                      OutMessage* msg, std::vector<wire::RRefRef>* forks);
  // The Value `meta` describes, from `msg` sent by member `from`: its
  // segments become tensors, its RRefs handles. DATA_LOSS if they disagree.
  StatusOr<Value> Decode(uint64_t from, wire::ValueMeta& meta, InMessage& msg);

 private:
  Status EncodeParts(Value& v, bool hand_over, uint64_t to, wire::ValueMeta* meta,
                     OutMessage* msg, std::vector<wire::RRefRef>* forks);
  // A received segment on the device its metadata names (copied up or down
  // through the device memory services where it landed elsewhere).
  StatusOr<AlignedBuffer> OnItsDevice(AlignedBuffer bytes, const wire::TensorMeta& meta,
                                      uint64_t from, size_t index);

  RRefContext& rrefs_;
  const Engine* engine_;
};

// Wraps a received segment as a DLManagedTensor that owns it, on the
// segment's device (the deleter gives the bytes back to the receive-buffer
// pool or the device allocator they came from, and frees the shape and
// itself).
DLManagedTensor* AdoptReceivedTensor(AlignedBuffer bytes, const wire::TensorMeta& meta);

// A copy of `v` as a to_here() from another worker would get it: bytes and
// tensors copied (device tensors on their device, through `device`, which
// may be NULL when there are none), RRef handles shared.
StatusOr<Value> CopyValue(const Value& v, const std::shared_ptr<DeviceMemory>& device);

// The moment-of-the-call guarantee (ferry.h, ferry_payload_t.zero_copy):
// every host tensor of `v` whose bit is clear in `zero_copy` is replaced by
// a copy of its bytes, in a pooled buffer (receive_buffers.h: a warm 64 MiB
// buffer is ~20x cheaper to fill than a fresh one), and its own deleter
// runs now. Device tensors are left as they are (their stream orders the
// read after the work queued before the call).
Status SnapshotHostTensors(Value& v, uint64_t zero_copy);
struct SnapshotCounts {
  uint64_t tensors = 0;
  uint64_t bytes = 0;
};
// What SnapshotHostTensors copied in this process.
SnapshotCounts SnapshotTotals();

}  // namespace ferry
