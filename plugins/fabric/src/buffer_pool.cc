#include "buffer_pool.h"

#include <rdma/fi_domain.h>

#include <cstdlib>
#include <cstring>

namespace ferry_fabric {

BufferArena::~BufferArena() {
  if (mr_ != nullptr) registrar_->Release(mr_);
  std::free(base_);
}

Status BufferArena::Init(Registrar* registrar, uint32_t count, uint32_t size,
                         uint64_t access) {
  registrar_ = registrar;
  count_ = count;
  size_ = size;
  bytes_ = static_cast<size_t>(count) * size;
  // Page alignment: FI_MR_ALLOCATED providers and pinning want whole pages.
  size_t rounded = (bytes_ + 4095) & ~static_cast<size_t>(4095);
  base_ = static_cast<char*>(std::aligned_alloc(4096, rounded));
  if (base_ == nullptr) {
    return Error(FERRY_RESOURCE_EXHAUSTED,
                 "fabric: cannot allocate %zu bytes of message buffers", rounded);
  }
  std::memset(base_, 0, rounded);
  Status st = registrar->Register(base_, rounded, ferry_device_t{FERRY_DEVICE_CPU, 0},
                                  access, &mr_);
  if (!st.ok()) return st;
  desc_ = fi_mr_desc(mr_);
  return Status();
}

Status TxPool::Init(Registrar* registrar, uint32_t count, uint32_t size) {
  Status st = arena_.Init(registrar, count, size, FI_SEND);
  if (!st.ok()) return st;
  bufs_.reset(new TxBuf[count]);
  for (uint32_t i = count; i-- > 0;) {
    bufs_[i].data = arena_.buffer(i);
    bufs_[i].desc = arena_.desc();
    Put(&bufs_[i]);
  }
  return Status();
}

Status RxPool::Init(Registrar* registrar, uint32_t count, uint32_t size) {
  Status st = arena_.Init(registrar, count, size, FI_RECV);
  if (!st.ok()) return st;
  bufs_.reset(new RxBuf[count]);
  for (uint32_t i = 0; i < count; ++i) {
    bufs_[i].data = arena_.buffer(i);
    bufs_[i].desc = arena_.desc();
  }
  return Status();
}

}  // namespace ferry_fabric
