// ferry::Value: what one call carries, either way — bytes, DLPack tensors
// and RRefs — with ownership explicit: a Value owns its tensors (each
// deleter runs exactly once: when the Value dies, when the tensor is sent,
// or when a user takes it out) and holds its RRef handles.
//
// It lives in wire/ because the layers above the engine all hold it (the
// RRef context keeps owned values, the agent sends and receives them);
// RRefHandle is only declared here, so wire/ does not depend on rref/. How a Value
// becomes a message (tensors as segments, RRefs forked) is the agent's value codec
// (agent/value_codec.h).
#pragma once

#include "common/status.h"

#include <dlpack/dlpack.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry {

class RRefHandle;

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
  // Device tensors: the stream their producer wrote them on
  // (FERRY_STREAM_*, ferry/common.h); 0 = ready now.
  uint64_t stream = 0;
};

// Checks a tensor the user hands to ferry: contiguous, a sane dtype, its
// byte size computed. Fails with a message naming the tensor and the fix.
StatusOr<uint64_t> TensorBytes(const DLTensor& t, size_t index);

}  // namespace ferry
