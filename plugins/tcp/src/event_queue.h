// The context's queue of events waiting for progress() to return them. A
// vector used as a FIFO that keeps its slots, so steady traffic queues
// events without touching the heap (messages are only set on errors).
#pragma once

#include <ferry/transport.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace ferry_tcp {

class Conn;

struct QueuedEvent {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  Conn* conn = nullptr;
  void* user_data = nullptr;
  std::string message;  // non-empty when status != FERRY_OK
  // FERRY_EV_ARRIVAL only: views into the connection's receive buffer.
  uint64_t msg_id = 0;
  const void* header = nullptr;
  uint64_t header_len = 0;
  const ferry_arrival_segment_t* segments = nullptr;
  uint32_t num_segments = 0;
  // Set when the host closed the connection before the event was returned:
  // it is dropped instead of delivered (only arrivals, which need an answer
  // the host can no longer give; see Context::RecallForClose).
  bool suppressed = false;
};

class EventQueue {
 public:
  // Appends an event and returns it for the caller to fill in (every field
  // is reset). The reference is valid until the next Push or Pop.
  QueuedEvent& Push(int32_t type, Conn* conn, void* user_data) {
    if (head_ == end_) {
      head_ = end_ = 0;
    } else if (head_ >= kCompactAt && head_ * 2 >= end_) {
      Compact();
    }
    // Slots are constructed once and reused, so steady traffic neither
    // constructs nor destroys anything here.
    if (end_ == items_.size()) AddSlot();
    QueuedEvent& e = items_[end_++];
    e.type = type;
    e.status = FERRY_OK;
    e.conn = conn;
    e.user_data = user_data;
    if (!e.message.empty()) e.message.clear();
    e.msg_id = 0;
    e.header = nullptr;
    e.header_len = 0;
    e.segments = nullptr;
    e.num_segments = 0;
    e.suppressed = false;
    return e;
  }

  bool Empty() const { return head_ == end_; }
  QueuedEvent& Front() { return items_[head_]; }
  void Pop() { ++head_; }

  template <typename Fn>
  void ForEachQueued(Fn&& fn) {
    for (size_t i = head_; i < end_; ++i) fn(items_[i]);
  }

 private:
  // The rare paths, out of line so that Push stays small enough to inline.
  __attribute__((noinline)) void Compact() {
    std::move(items_.begin() + static_cast<long>(head_),
              items_.begin() + static_cast<long>(end_), items_.begin());
    end_ -= head_;
    head_ = 0;
  }
  __attribute__((noinline)) void AddSlot() { items_.emplace_back(); }

  static constexpr size_t kCompactAt = 4096;
  std::vector<QueuedEvent> items_;  // [head_, end_) queued; the rest spare
  size_t head_ = 0;
  size_t end_ = 0;
};

}  // namespace ferry_tcp
