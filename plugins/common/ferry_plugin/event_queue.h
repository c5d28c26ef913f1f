// The events a plugin context has queued for progress() to return, and the
// one way they are handed to the host. A vector used as a FIFO that keeps
// its slots, so steady traffic queues and delivers events without touching
// the heap (failure texts are the only strings, and only on errors).
//
// Conn is the plugin's connection type; it is only stored and handed back.
#pragma once

#include <ferry/transport.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace ferry_plugin {

template <typename Conn>
struct QueuedEvent {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  Conn* conn = nullptr;
  void* user_data = nullptr;
  std::string message;  // non-empty when status != FERRY_OK
  // FERRY_EV_ARRIVAL only: views into the plugin's held message.
  uint64_t msg_id = 0;
  const void* header = nullptr;
  uint64_t header_len = 0;
  const ferry_arrival_segment_t* segments = nullptr;
  uint32_t num_segments = 0;
  // Set when the host closed the connection before the event was returned:
  // it is dropped instead of delivered (only arrivals, which need an answer
  // the host can no longer give).
  bool suppressed = false;
};

template <typename Conn>
class EventQueue {
 public:
  using Event = QueuedEvent<Conn>;

  // Appends an event and returns it for the caller to fill in (every field
  // is reset). The reference is valid until the next Push or Pop.
  Event& Push(int32_t type, Conn* conn, void* user_data) {
    if (head_ == end_) {
      head_ = end_ = 0;
    } else if (head_ >= kCompactAt && head_ * 2 >= end_) {
      Compact();
    }
    // Slots are constructed once and reused, so steady traffic neither
    // constructs nor destroys anything here.
    if (end_ == items_.size()) AddSlot();
    Event& e = items_[end_++];
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

  template <typename Fn>
  void ForEachQueued(Fn&& fn) {
    for (size_t i = head_; i < end_; ++i) fn(items_[i]);
  }

  // Hands queued events to the host: at most args->max_events, written at
  // the host's stride and struct size (in place when the host's array holds
  // aligned ferry_event_t or larger structs, else built here and the part
  // the host's smaller struct has copied), suppressed ones dropped. The
  // caller checked args->events and args->event_stride.
  // conn_fields(conn, ev) sets ev->conn and ev->conn_user_data (conn may be
  // null); delivered(conn, type) runs once the event left the queue (it may
  // queue more events, delivered in a later call).
  template <typename ConnFields, typename Delivered>
  uint32_t Deliver(const ferry_progress_args_t* args, ConnFields&& conn_fields,
                   Delivered&& delivered) {
    const size_t stride = static_cast<size_t>(args->event_stride);
    const size_t size = std::min(stride, sizeof(ferry_event_t));
    char* const base = static_cast<char*>(static_cast<void*>(args->events));
    const bool in_place = stride >= sizeof(ferry_event_t) &&
                          stride % alignof(ferry_event_t) == 0 &&
                          reinterpret_cast<uintptr_t>(base) % alignof(ferry_event_t) == 0;
    ferry_event_t local;
    uint32_t count = 0;
    while (count < args->max_events && !Empty()) {
      Event& q = items_[head_];
      if (q.suppressed) {
        ++head_;
        continue;
      }
      ferry_event_t* ev =
          in_place ? reinterpret_cast<ferry_event_t*>(base + stride * count) : &local;
      Conn* conn = q.conn;
      const int32_t type = q.type;
      ev->struct_size = static_cast<uint32_t>(size);
      ev->type = type;
      ev->status = q.status;
      ev->num_segments = q.num_segments;
      ev->user_data = q.user_data;
      conn_fields(conn, ev);
      if (!q.message.empty()) {
        // The host may read the text until its next progress().
        delivered_messages_.push_back(std::move(q.message));
        ev->message = delivered_messages_.back().c_str();
      } else {
        ev->message = "";
      }
      ev->msg_id = q.msg_id;
      ev->header = q.header;
      ev->header_len = q.header_len;
      ev->segments = q.segments;
      ev->segment_stride = type == FERRY_EV_ARRIVAL ? sizeof(ferry_arrival_segment_t) : 0;
      if (!in_place) std::memcpy(base + stride * count, &local, size);
      ++head_;
      ++count;
      delivered(conn, type);
    }
    return count;
  }

  // Frees the failure texts of the events delivered before (call at the
  // start of progress()).
  void ForgetDelivered() {
    if (!delivered_messages_.empty()) delivered_messages_.clear();
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
  std::vector<Event> items_;  // [head_, end_) queued; the rest spare
  size_t head_ = 0;
  size_t end_ = 0;
  std::deque<std::string> delivered_messages_;
};

}  // namespace ferry_plugin
