// Buffers and ownership of core messages (message.h).
#include "engine/message.h"

#include "engine/receive_buffers.h"

namespace ferry {

AlignedBuffer::AlignedBuffer(size_t n) : data(receive_buffers::Allocate(n)), size(n) {}

AlignedBuffer::~AlignedBuffer() {
  receive_buffers::Release(data, size);
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    receive_buffers::Release(data, size);
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
