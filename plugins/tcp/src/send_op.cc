#include "send_op.h"

namespace ferry_tcp {

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
  op->iov_pos = 0;
  if (op->meta_capacity > kMaxPooledMeta) {
    op->meta.reset();
    op->meta_capacity = 0;
  }
  free_.push_back(op);
}

}  // namespace ferry_tcp
