#include "event_sink.h"

#include <algorithm>
#include <cstring>

namespace ferry_shm {

ferry_event_t EventSink::Make(int32_t type, ferry_status_t status,
                              ferry_conn_t* conn, void* user_data,
                              void* conn_user_data) {
  ferry_event_t ev;
  std::memset(&ev, 0, sizeof ev);
  ev.struct_size = sizeof ev;
  ev.type = type;
  ev.status = status;
  ev.conn = conn;
  ev.user_data = user_data;
  ev.conn_user_data = conn_user_data;
  return ev;
}

void EventSink::Begin(ferry_progress_args_t* args) {
  args_ = args;
  count_ = 0;
  max_ = args->max_events;
  if (!messages_.empty()) messages_.clear();
  while (!backlog_.empty() && !full()) {
    Pending& p = backlog_.front();
    if (p.conn_user_data != nullptr) {
      p.ev.conn_user_data = p.conn_user_data->load(std::memory_order_relaxed);
    }
    Write(p.ev, p.message.empty() ? nullptr : &p.message);
    backlog_.pop_front();
  }
}

bool EventSink::CancelUnseenConnected(ferry_conn_t* conn, const std::string& message) {
  for (Pending& p : backlog_) {
    if (p.ev.conn == conn && p.ev.type == FERRY_EV_CONNECTED && p.ev.status == FERRY_OK) {
      p.ev.status = FERRY_CANCELLED;
      p.message = message;
      return true;
    }
  }
  return false;
}

void EventSink::End() { args_->num_events = count_; }

void EventSink::Emit(const ferry_event_t& ev, const std::string& message,
                     const std::atomic<void*>* conn_user_data) {
  if (full() || !backlog_.empty()) {
    backlog_.push_back(Pending{ev, message, conn_user_data});
    return;
  }
  Write(ev, message.empty() ? nullptr : &message);
}

void EventSink::Write(ferry_event_t ev, const std::string* message) {
  ev.message = nullptr;
  if (message != nullptr) {
    messages_.push_back(*message);
    ev.message = messages_.back().c_str();
  }
  const size_t n = std::min<uint64_t>(args_->event_stride, sizeof ev);
  ev.struct_size = static_cast<uint32_t>(n);
  auto* dst = reinterpret_cast<char*>(args_->events) +
              static_cast<size_t>(args_->event_stride) * count_;
  std::memcpy(dst, &ev, n);
  ++count_;
}

}  // namespace ferry_shm
