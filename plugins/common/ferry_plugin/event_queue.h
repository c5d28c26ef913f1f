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

// A queued event is the ferry_event_t that progress() will return, built
// when the event is queued, so that delivery is one struct copy. Delivery
// sets what only it knows: struct_size (the host's), conn and
// conn_user_data (from `owner`) and message (from `text`).
template <typename Conn>
struct QueuedEvent : ferry_event_t {
  Conn* owner = nullptr;  // the connection concerned, or null
  std::string text;       // non-empty when status != FERRY_OK
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
    // Field by field, not `= ferry_event_t{}`: that compiles to a `rep
    // stos` whose start-up costs more than the stores, on every message.
    // struct_size, conn, conn_user_data and message are Deliver's to set.
    static_assert(sizeof(ferry_event_t) == 88,
                  "a field added to ferry_event_t must be reset here");
    e.type = type;
    e.status = FERRY_OK;
    e.num_segments = 0;
    e.user_data = user_data;
    e.msg_id = 0;
    e.header = nullptr;
    e.header_len = 0;
    e.segments = nullptr;
    e.segment_stride = type == FERRY_EV_ARRIVAL ? sizeof(ferry_arrival_segment_t) : 0;
    e.owner = conn;
    if (!e.text.empty()) e.text.clear();
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
      // Kept apart: delivered() may queue events, which may move q.
      Conn* const owner = q.owner;
      const int32_t type = q.type;
      ferry_event_t* ev =
          in_place ? reinterpret_cast<ferry_event_t*>(base + stride * count) : &local;
      // Field by field (see Push); conn and conn_user_data by conn_fields.
      ev->struct_size = static_cast<uint32_t>(size);
      ev->type = q.type;
      ev->status = q.status;
      ev->num_segments = q.num_segments;
      ev->user_data = q.user_data;
      ev->msg_id = q.msg_id;
      ev->header = q.header;
      ev->header_len = q.header_len;
      ev->segments = q.segments;
      ev->segment_stride = q.segment_stride;
      conn_fields(owner, ev);
      if (q.text.empty()) {
        ev->message = "";
      } else {
        // The host may read the text until its next progress().
        delivered_messages_.push_back(std::move(q.text));
        ev->message = delivered_messages_.back().c_str();
      }
      if (!in_place) std::memcpy(base + stride * count, &local, size);
      ++head_;
      ++count;
      delivered(owner, type);
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
