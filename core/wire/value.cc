// Value ownership and DLPack helpers (value.h).
#include "wire/value.h"

namespace ferry {

Value::~Value() {
  for (DLManagedTensor* t : tensors) {
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
}

Value& Value::operator=(Value&& o) noexcept {
  if (this != &o) {
    for (DLManagedTensor* t : tensors) {
      if (t != nullptr && t->deleter != nullptr) t->deleter(t);
    }
    bytes = std::move(o.bytes);
    tensors = std::move(o.tensors);
    rrefs = std::move(o.rrefs);
    stream = o.stream;
    o.tensors.clear();
  }
  return *this;
}

StatusOr<uint64_t> TensorBytes(const DLTensor& t, size_t index) {
  const std::string which = "tensor " + std::to_string(index);
  if (t.ndim < 0 || t.ndim > 64) {
    return Status(FERRY_INVALID_ARGUMENT, which + " has ndim " + std::to_string(t.ndim));
  }
  const uint64_t lanes = t.dtype.lanes == 0 ? 1 : t.dtype.lanes;
  const uint64_t bits = static_cast<uint64_t>(t.dtype.bits) * lanes;
  if (bits == 0 || bits % 8 != 0) {
    return Status(FERRY_INVALID_ARGUMENT,
                  which + " has a dtype of " + std::to_string(bits) +
                      " bits per element; only whole bytes are carried");
  }
  uint64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) {
      return Status(FERRY_INVALID_ARGUMENT, which + " has a negative dimension");
    }
    n *= static_cast<uint64_t>(t.shape[i]);
  }
  if (t.strides != nullptr && n > 0) {
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect) {
        return Status(FERRY_INVALID_ARGUMENT,
                      which +
                          " is not contiguous: pass a contiguous copy "
                          "(e.g. .contiguous() / np.ascontiguousarray)");
      }
      expect *= t.shape[i];
    }
  }
  if (t.data == nullptr && n > 0) {
    return Status(FERRY_INVALID_ARGUMENT, which + " has no data pointer");
  }
  return n * (bits / 8);
}

}  // namespace ferry
