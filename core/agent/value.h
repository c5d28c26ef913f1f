// ferry::Value: what one call carries, either way — bytes, DLPack tensors
// and RRefs — with ownership explicit: a Value owns its tensors (each
// deleter runs exactly once: when the Value dies, when the tensor is sent,
// or when a user takes it out) and holds its RRef handles.
#pragma once

#include "common/status.h"

#include <dlpack/dlpack.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry {

class RRefHandle;
struct AlignedBuffer;
struct InMessage;
namespace wire { struct TensorMeta; }

struct Value {
  Value() = default;
  ~Value();
  Value(Value&& o) noexcept = default;
  Value& operator=(Value&& o) noexcept;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  std::string bytes;
  std::vector<DLManagedTensor*> tensors;  // owned; NULL once taken
  std::vector<std::shared_ptr<RRefHandle>> rrefs;
};

// Checks a tensor the user hands to ferry: contiguous, a sane dtype, its
// byte size computed. Fails with a message naming the tensor and the fix.
StatusOr<uint64_t> TensorBytes(const DLTensor& t, size_t index);

// Wraps a received segment as a DLManagedTensor that owns it (the deleter
// gives the bytes back to the receive-buffer pool and frees the shape and
// itself).
DLManagedTensor* AdoptReceivedTensor(AlignedBuffer bytes, const wire::TensorMeta& meta);

}  // namespace ferry
