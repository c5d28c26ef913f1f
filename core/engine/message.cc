// Buffers and ownership of core messages (message.h).
#include "engine/message.h"

#include <new>

namespace ferry {

AlignedBuffer::AlignedBuffer(size_t n) : size(n) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  const size_t rounded = ((n + 63) / 64) * 64;
  data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (data == nullptr) throw std::bad_alloc();
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data);
    data = o.data;
    size = o.size;
    o.data = nullptr;
    o.size = 0;
  }
  return *this;
}

OutMessage::~OutMessage() {
  for (auto& t : tensors) {
    if (t.managed != nullptr && t.managed->deleter != nullptr) {
      t.managed->deleter(t.managed);
    }
  }
}

}  // namespace ferry
