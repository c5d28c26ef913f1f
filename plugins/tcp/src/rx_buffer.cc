#include "rx_buffer.h"

#include <cstdlib>
#include <cstring>

namespace ferry_tcp {

RxBuffer::RxBuffer(size_t default_capacity) : default_capacity_(default_capacity) {}

RxBuffer::~RxBuffer() {
  std::free(buf_);
}

bool RxBuffer::PrepareReadSlow(size_t total) {
  if (begin_ > 0) {
    std::memmove(buf_, buf_ + begin_, size());
    end_ -= begin_;
    begin_ = 0;
  }
  size_t want = total > default_capacity_ ? total : default_capacity_;
  if (capacity_ < want || buf_ == nullptr) {
    char* grown = static_cast<char*>(std::realloc(buf_, want));
    if (grown == nullptr) return false;
    buf_ = grown;
    capacity_ = want;
  }
  return true;
}

void RxBuffer::Release() {
  std::free(buf_);
  buf_ = nullptr;
  capacity_ = 0;
  begin_ = end_ = 0;
}

}  // namespace ferry_tcp
