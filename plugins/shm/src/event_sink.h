// Where progress() puts its events: straight into the host's array (strided
// by the host's event_stride, each event written only within
// min(stride, sizeof)), or, once that is full, into a backlog handed out
// first by the next progress(). Event messages live here until the next
// progress() call, as the ABI promises.
//
// Arrivals never go to the backlog (the receive path checks full() first),
// so an arrival's borrowed pointers are always handed out while valid.
#pragma once

#include <ferry/transport.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>

namespace ferry_shm {

class EventSink {
 public:
  // Starts one progress() call: drops the previous call's messages, then
  // hands out backlogged events.
  void Begin(ferry_progress_args_t* args) {
    args_ = args;
    count_ = 0;
    max_ = args->max_events;
    // The busy path: nothing to drop, nothing waiting.
    if (!messages_.empty() || !backlog_.empty()) BeginSlow();
  }
  // Ends it: reports how many events were written.
  void End() { args_->num_events = count_; }

  bool full() const { return count_ >= max_; }
  bool has_backlog() const { return !backlog_.empty(); }
  uint32_t count() const { return count_; }

  // Emits `ev`, which carries no message (its message pointer is ignored).
  // `conn_user_data`, when given, is re-read if the event waits in the
  // backlog: the host sees the value current when the event is returned.
  // Inline: this is every message's path (SEND_DONE, ARRIVAL), and it costs
  // one copy of the event into the host's array.
  void Emit(const ferry_event_t& ev, const std::atomic<void*>* conn_user_data = nullptr) {
    if (count_ < max_ && backlog_.empty()) {
      Write(ev, nullptr);
    } else {
      Queue(ev, std::string(), conn_user_data);
    }
  }
  // The same with a message (copied; valid until the next progress()).
  void Emit(const ferry_event_t& ev, const std::string& message,
            const std::atomic<void*>* conn_user_data);
  // close() on `conn`: a CONNECTED(OK) the host has not seen yet becomes
  // CANCELLED. True when there was one.
  bool CancelUnseenConnected(ferry_conn_t* conn, const std::string& message);

  // The common fields filled in.
  static ferry_event_t Make(int32_t type, ferry_status_t status, ferry_conn_t* conn,
                            void* user_data, void* conn_user_data) {
    ferry_event_t ev{};
    ev.struct_size = sizeof ev;
    ev.type = type;
    ev.status = status;
    ev.conn = conn;
    ev.user_data = user_data;
    ev.conn_user_data = conn_user_data;
    return ev;
  }

 private:
  void BeginSlow();
  void Queue(const ferry_event_t& ev, const std::string& message,
             const std::atomic<void*>* conn_user_data);
  void Write(const ferry_event_t& ev, const char* message) {
    auto* dst = reinterpret_cast<char*>(args_->events) +
                static_cast<size_t>(args_->event_stride) * count_;
    if (args_->event_stride >= sizeof(ferry_event_t)) {
      // A host built against this header or a newer one: one struct copy.
      auto* out = reinterpret_cast<ferry_event_t*>(dst);
      *out = ev;
      out->struct_size = sizeof(ferry_event_t);
      out->message = message;
    } else {
      ferry_event_t copy = ev;
      copy.message = message;
      const size_t n = static_cast<size_t>(args_->event_stride);
      copy.struct_size = static_cast<uint32_t>(n);
      std::memcpy(dst, &copy, n);
    }
    ++count_;
  }
  const char* Keep(const std::string& message) {
    if (message.empty()) return nullptr;
    messages_.push_back(message);
    return messages_.back().c_str();
  }

  ferry_progress_args_t* args_ = nullptr;
  uint32_t count_ = 0;
  uint32_t max_ = 0;
  std::deque<std::string> messages_;  // deque: strings never move
  struct Pending {
    ferry_event_t ev;
    std::string message;
    const std::atomic<void*>* conn_user_data;
  };
  std::deque<Pending> backlog_;
};

}  // namespace ferry_shm
