#include "event_sink.h"

namespace ferry_shm {

void EventSink::BeginSlow() {
  messages_.clear();
  while (!backlog_.empty() && !full()) {
    Pending& p = backlog_.front();
    if (p.conn_user_data != nullptr) {
      p.ev.conn_user_data = p.conn_user_data->load(std::memory_order_acquire);
    }
    Write(p.ev, Keep(p.message));
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

void EventSink::Emit(const ferry_event_t& ev, const std::string& message,
                     const std::atomic<void*>* conn_user_data) {
  if (full() || !backlog_.empty()) {
    Queue(ev, message, conn_user_data);
    return;
  }
  Write(ev, Keep(message));
}

void EventSink::Queue(const ferry_event_t& ev, const std::string& message,
                      const std::atomic<void*>* conn_user_data) {
  backlog_.push_back(Pending{ev, message, conn_user_data});
}

}  // namespace ferry_shm
