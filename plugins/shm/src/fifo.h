// A growable FIFO over a power-of-two array: push/pop/index without the
// block allocations std::deque makes as it moves along, so a steady stream
// of messages allocates nothing.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ferry_shm {

template <typename T>
class Fifo {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return items_[(head_ + i) & (items_.size() - 1)]; }
  T& front() { return (*this)[0]; }

  void push_back(T v) {
    if (size_ == items_.size()) Grow();
    items_[(head_ + size_) & (items_.size() - 1)] = std::move(v);
    ++size_;
  }
  T pop_front() {
    T v = std::move(items_[head_]);
    head_ = (head_ + 1) & (items_.size() - 1);
    --size_;
    return v;
  }

 private:
  void Grow() {
    std::vector<T> bigger(items_.empty() ? 16 : items_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    items_.swap(bigger);
    head_ = 0;
  }
  std::vector<T> items_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace ferry_shm
