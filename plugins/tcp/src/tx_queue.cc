#include "tx_queue.h"

namespace ferry_tcp {

void TxQueue::PushBack(SendOp* op) {
  op->next = nullptr;
  if (tail_ == nullptr) {
    head_ = tail_ = op;
  } else {
    tail_->next = op;
    tail_ = op;
  }
  ++size_;
}

void TxQueue::PushFront(SendOp* op) {
  op->next = head_;
  head_ = op;
  if (tail_ == nullptr) tail_ = op;
  ++size_;
}

SendOp* TxQueue::PopFront() {
  SendOp* op = head_;
  if (op == nullptr) return nullptr;
  head_ = op->next;
  if (head_ == nullptr) tail_ = nullptr;
  op->next = nullptr;
  --size_;
  return op;
}

}  // namespace ferry_tcp
