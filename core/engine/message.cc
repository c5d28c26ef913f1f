// Buffers and ownership of core messages (message.h).
#include "engine/message.h"

#include "engine/device_memory.h"
#include "engine/receive_buffers.h"

namespace ferry {

AlignedBuffer::AlignedBuffer(size_t n) : data(receive_buffers::Allocate(n)), size(n) {}

StatusOr<AlignedBuffer> AlignedBuffer::OnDevice(std::shared_ptr<DeviceMemory> memory,
                                                DLDevice device, size_t n) {
  auto p = memory->Alloc(device, n);
  if (!p.ok()) return p.status();
  AlignedBuffer b;
  b.data = p.value();
  b.size = n;
  b.device = device;
  b.memory = std::move(memory);
  return b;
}

void AlignedBuffer::Release() {
  if (memory) {
    memory->Free(device, data, size);
    memory.reset();
  } else {
    receive_buffers::Release(data, size);
  }
  data = nullptr;
  size = 0;
  device = DLDevice{kDLCPU, 0};
}

AlignedBuffer::~AlignedBuffer() {
  Release();
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data = o.data;
    size = o.size;
    device = o.device;
    memory = std::move(o.memory);
    o.data = nullptr;
    o.size = 0;
    o.device = DLDevice{kDLCPU, 0};
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
