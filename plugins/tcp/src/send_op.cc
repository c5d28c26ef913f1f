#include "send_op.h"

#include <algorithm>
#include <cstring>

namespace ferry_tcp {

void IovList::Grow(size_t n, bool keep) {
  size_t cap = std::max(n, capacity_ * 2);
  std::unique_ptr<iovec[]> grown(new iovec[cap]);
  if (keep && size_ > 0) std::memcpy(grown.get(), data_, size_ * sizeof(iovec));
  heap_ = std::move(grown);
  data_ = heap_.get();
  capacity_ = cap;
}

void IovList::ShrinkTo(size_t max_kept) {
  if (heap_ == nullptr || capacity_ <= max_kept) return;
  heap_.reset();
  data_ = inline_;
  capacity_ = kInline;
  size_ = 0;
}

SendOpPool::~SendOpPool() {
  for (SendOp* op : free_) delete op;
}

SendOp* SendOpPool::Get() {
  if (free_.empty()) return new SendOp();
  SendOp* op = free_.back();
  free_.pop_back();
  return op;
}

void SendOpPool::Put(SendOp* op) {
  if (free_.size() >= kMaxPooled) {
    delete op;
    return;
  }
  op->next = nullptr;
  op->user_data = nullptr;
  op->internal = false;
  op->iov.clear();
  op->iov.ShrinkTo(kMaxPooledIov);
  op->iov_pos = 0;
  if (op->meta_capacity > kMaxPooledMeta) {
    op->meta.reset();
    op->meta_capacity = 0;
  }
  free_.push_back(op);
}

}  // namespace ferry_tcp
