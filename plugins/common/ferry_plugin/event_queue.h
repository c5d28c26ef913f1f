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

// Whether the host's event array holds ferry_event_t-sized (or larger),
// aligned slots that events can be written into as they are.
inline bool HostSlotsInPlace(const ferry_progress_args_t* args) {
  const size_t stride = static_cast<size_t>(args->event_stride);
  return stride >= sizeof(ferry_event_t) && stride % alignof(ferry_event_t) == 0 &&
         reinterpret_cast<uintptr_t>(args->events) % alignof(ferry_event_t) == 0;
}

// segment_stride of a fresh event of `type`: arrivals describe their
// segments with the plugin's ferry_arrival_segment_t, other events have none.
inline uint64_t SegmentStrideOf(int32_t type) {
  return type == FERRY_EV_ARRIVAL ? sizeof(ferry_arrival_segment_t) : 0;
}

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
    e.segment_stride = SegmentStrideOf(type);
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

  // Hands queued events to the host: into slots first.. of args->events (at
  // most args->max_events in all), written at the host's stride and struct
  // size (in place when the host's array holds aligned ferry_event_t or
  // larger structs, else built here and the part the host's smaller struct
  // has copied), suppressed ones dropped; returns how many it wrote. The
  // caller checked args->events and args->event_stride.
  // conn_fields(conn, ev) sets ev->conn and ev->conn_user_data (conn may be
  // null); delivered(conn, type) runs once the event left the queue (it may
  // queue more events, delivered in a later call).
  template <typename ConnFields, typename Delivered>
  uint32_t Deliver(const ferry_progress_args_t* args, uint32_t first,
                   ConnFields&& conn_fields, Delivered&& delivered) {
    const size_t stride = static_cast<size_t>(args->event_stride);
    const size_t size = std::min(stride, sizeof(ferry_event_t));
    char* const base =
        static_cast<char*>(static_cast<void*>(args->events)) + stride * first;
    const bool in_place = HostSlotsInPlace(args);
    ferry_event_t local;
    const uint32_t room = args->max_events > first ? args->max_events - first : 0;
    uint32_t count = 0;
    while (count < room && !Empty()) {
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

// The host's event array during one progress() call, open for events that
// progress() writes straight into it instead of queueing them: an arrival
// read from the network while nothing is queued before it is written once,
// into the slot the host reads, not built in the queue and copied out after
// (the latency path of every message). Writes go after the events already
// delivered in this call; the plugin delivers what it queued after them, so
// the host sees events in the order they happened.
class HostEvents {
 public:
  // Opens args->events after its first `used` slots; stays closed when the
  // host's slots cannot take a ferry_event_t as it is (HostSlotsInPlace).
  void Open(const ferry_progress_args_t* args, uint32_t used) {
    base_ = nullptr;
    count_ = used;
    if (args->max_events <= used || !HostSlotsInPlace(args)) return;
    base_ = static_cast<char*>(static_cast<void*>(args->events));
    stride_ = static_cast<size_t>(args->event_stride);
    max_ = args->max_events;
    first_direct_ = used;
  }
  // Closes the array (outside progress() nothing may be written) and
  // returns how many of its slots hold events.
  uint32_t Close() {
    base_ = nullptr;
    return count_;
  }
  // The next free slot, with what EventQueue's Push and Deliver would have
  // set (an OK event of `type` on `conn`, no user_data, no message); the
  // message fields (msg_id, header, header_len, segments, num_segments)
  // are the caller's to write. nullptr when closed or full: queue the
  // event then.
  ferry_event_t* Take(int32_t type, ferry_conn_t* conn, void* conn_user_data) {
    if (base_ == nullptr || count_ == max_) return nullptr;
    auto* ev = reinterpret_cast<ferry_event_t*>(base_ + stride_ * count_++);
    ev->struct_size = static_cast<uint32_t>(sizeof(ferry_event_t));
    ev->type = type;
    ev->status = FERRY_OK;
    ev->conn = conn;
    ev->user_data = nullptr;
    ev->conn_user_data = conn_user_data;
    ev->message = "";
    ev->segment_stride = SegmentStrideOf(type);
    return ev;
  }
  // Removes the events written here that `match` (what a queued event's
  // `suppressed` does for the queue): later ones move down a slot.
  template <typename Match>
  void Retract(Match&& match) {
    if (base_ == nullptr) return;
    uint32_t kept = first_direct_;
    for (uint32_t i = first_direct_; i < count_; ++i) {
      char* slot = base_ + stride_ * i;
      if (match(*reinterpret_cast<const ferry_event_t*>(slot))) continue;
      if (kept != i) std::memcpy(base_ + stride_ * kept, slot, sizeof(ferry_event_t));
      ++kept;
    }
    count_ = kept;
  }

 private:
  char* base_ = nullptr;  // null: closed
  size_t stride_ = 0;
  uint32_t max_ = 0;
  uint32_t count_ = 0;         // slots holding events (delivered + direct)
  uint32_t first_direct_ = 0;  // the first slot written through Take()
};

}  // namespace ferry_plugin
