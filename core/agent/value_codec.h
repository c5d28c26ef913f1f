// ferry::ValueCodec: a Value into a message for one member, and back. The
// bytes and the tensors' descriptions go into the body's wire::ValueMeta,
// the tensors' memory travels as the message's segments (zero-copy: the
// message takes the tensors over), and each RRef is forked for the
// destination through the RRef context (the forks are returned, so a
// message that is never sent can undo them).
#pragma once

#include "common/status.h"
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
  explicit ValueCodec(RRefContext& rrefs) : rrefs_(rrefs) {}

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

  RRefContext& rrefs_;
};

// Wraps a received segment as a DLManagedTensor that owns it (the deleter
// gives the bytes back to the receive-buffer pool and frees the shape and
// itself).
DLManagedTensor* AdoptReceivedTensor(AlignedBuffer bytes, const wire::TensorMeta& meta);

// A copy of `v` as a to_here() from another worker would get it: bytes and
// tensors copied, RRef handles shared.
StatusOr<Value> CopyValue(const Value& v);

}  // namespace ferry
