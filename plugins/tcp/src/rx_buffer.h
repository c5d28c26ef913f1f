// A connection's receive buffer: bytes read from the socket and not yet
// consumed. recv() fills the tail in one call, which for small messages is
// the whole message; an arrival's header and inline segments are handed to
// the host as views into it, so it never moves while an arrival is held.
#pragma once

#include <cstddef>

namespace ferry_tcp {

class RxBuffer {
 public:
  explicit RxBuffer(size_t default_capacity);
  ~RxBuffer();
  RxBuffer(const RxBuffer&) = delete;
  RxBuffer& operator=(const RxBuffer&) = delete;

  char* data() { return buf_ + begin_; }
  size_t size() const { return end_ - begin_; }
  char* tail() { return buf_ + end_; }
  size_t tail_space() const { return capacity_ - end_; }

  void Produce(size_t n) { end_ += n; }
  void Consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }

  // Makes the unconsumed bytes start at the front and the buffer hold at
  // least `total` bytes, so a read can complete a unit of that size. Moves
  // the data: callers must not hold views into it. False when out of memory.
  bool PrepareRead(size_t total) {
    if (begin_ == 0 && buf_ != nullptr && capacity_ >= total) return true;
    return PrepareReadSlow(total);
  }

  // Returns a buffer that grew for one big message to its default size once
  // it is empty again, so an idle connection holds little memory.
  void ShrinkIfIdle() {
    if (size() == 0 && capacity_ > default_capacity_) Release();
  }

 private:
  bool PrepareReadSlow(size_t total);
  void Release();

  char* buf_ = nullptr;
  size_t capacity_ = 0;
  size_t default_capacity_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace ferry_tcp
