// The context's registered buffers: receive buffers kept posted, and bounce
// buffers for outgoing frames. Each pool is one allocation registered once
// (FI_MR_LOCAL providers need descriptors for every buffer they touch, and
// one registration is far cheaper than one per message), so the hot path
// never allocates or registers.
#pragma once

#include "ops.h"
#include "registration.h"
#include "status.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace ferry_fabric {

class BufferArena {
 public:
  BufferArena() = default;
  ~BufferArena();
  BufferArena(const BufferArena&) = delete;
  BufferArena& operator=(const BufferArena&) = delete;

  // count buffers of `size` bytes, page-aligned, registered with `access`.
  Status Init(Registrar* registrar, uint32_t count, uint32_t size, uint64_t access);
  char* buffer(uint32_t i) const { return base_ + static_cast<size_t>(i) * size_; }
  void* desc() const { return desc_; }
  uint32_t count() const { return count_; }
  uint32_t size() const { return size_; }

 private:
  Registrar* registrar_ = nullptr;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  uint32_t count_ = 0;
  uint32_t size_ = 0;
  fid_mr* mr_ = nullptr;
  void* desc_ = nullptr;
};

class TxPool {
 public:
  Status Init(Registrar* registrar, uint32_t count, uint32_t size);
  TxBuf* Get() {
    TxBuf* b = free_;
    if (b != nullptr) {
      free_ = b->next;
      b->next = nullptr;
      --available_;
    }
    return b;
  }
  void Put(TxBuf* b) {
    b->peer = nullptr;
    b->conn_id = 0;
    b->next = free_;
    free_ = b;
    ++available_;
  }
  uint32_t size() const { return arena_.size(); }
  uint32_t available() const { return available_; }

 private:
  BufferArena arena_;
  std::unique_ptr<TxBuf[]> bufs_;
  TxBuf* free_ = nullptr;
  uint32_t available_ = 0;
};

class RxPool {
 public:
  Status Init(Registrar* registrar, uint32_t count, uint32_t size);
  uint32_t count() const { return arena_.count(); }
  uint32_t size() const { return arena_.size(); }
  RxBuf* at(uint32_t i) { return &bufs_[i]; }

 private:
  BufferArena arena_;
  std::unique_ptr<RxBuf[]> bufs_;
};

}  // namespace ferry_fabric
