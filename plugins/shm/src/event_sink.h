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

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>

namespace ferry_shm {

class EventSink {
 public:
  // Starts one progress() call: drops the previous call's messages, then
  // hands out backlogged events.
  void Begin(ferry_progress_args_t* args);
  // Ends it: reports how many events were written.
  void End();

  bool full() const { return count_ >= max_; }
  bool has_backlog() const { return !backlog_.empty(); }
  uint32_t count() const { return count_; }

  // Emits `ev` (its message pointer is ignored: `message` is copied).
  // `conn_user_data`, when given, is re-read if the event waits in the
  // backlog: the host sees the value current when the event is returned.
  void Emit(const ferry_event_t& ev, const std::string& message = std::string(),
            const std::atomic<void*>* conn_user_data = nullptr);
  // close() on `conn`: a CONNECTED(OK) the host has not seen yet becomes
  // CANCELLED. True when there was one.
  bool CancelUnseenConnected(ferry_conn_t* conn, const std::string& message);

  // The common fields filled in.
  static ferry_event_t Make(int32_t type, ferry_status_t status,
                            ferry_conn_t* conn, void* user_data,
                            void* conn_user_data);

 private:
  void Write(ferry_event_t ev, const std::string* message);

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
