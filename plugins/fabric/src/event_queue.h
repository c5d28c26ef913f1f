// The context's queue of events waiting for progress() to return them. A
// vector used as a FIFO that keeps its capacity, so steady traffic queues
// events without touching the heap (messages are only set on errors).
#pragma once

#include <ferry/transport.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ferry_fabric {

class Conn;

struct QueuedEvent {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  Conn* conn = nullptr;
  void* user_data = nullptr;
  std::string message;  // non-empty when status != FERRY_OK
  // FERRY_EV_ARRIVAL only: views into the held message.
  uint64_t msg_id = 0;
  const void* header = nullptr;
  uint64_t header_len = 0;
  const ferry_arrival_segment_t* segments = nullptr;
  uint32_t num_segments = 0;
  // The host closed the connection before this arrival was returned: it is
  // dropped instead of delivered (the host could no longer answer it).
  bool suppressed = false;
};

class EventQueue {
 public:
  QueuedEvent& Push(int32_t type, Conn* conn, void* user_data) {
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    } else if (head_ >= kCompactAt && head_ * 2 >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + static_cast<long>(head_));
      head_ = 0;
    }
    QueuedEvent& e = items_.emplace_back();
    e.type = type;
    e.conn = conn;
    e.user_data = user_data;
    return e;
  }

  bool Empty() const { return head_ == items_.size(); }
  QueuedEvent& Front() { return items_[head_]; }
  void Pop() {
    items_[head_].message.clear();
    ++head_;
  }

  template <typename Fn>
  void ForEachQueued(Fn&& fn) {
    for (size_t i = head_; i < items_.size(); ++i) fn(items_[i]);
  }

 private:
  static constexpr size_t kCompactAt = 4096;
  std::vector<QueuedEvent> items_;
  size_t head_ = 0;
};

}  // namespace ferry_fabric
