#include "harness/event_pump.h"

#include "testkit/endpoint.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <sstream>
#include <thread>

namespace ferry::conformance {
namespace {

constexpr size_t kRecentEvents = 16;

}  // namespace

void EventPump::Add(Transport* transport) {
  for (Transport* t : transports_) {
    if (t == transport) return;
  }
  transports_.push_back(transport);
}

void EventPump::Remove(Transport* transport) {
  for (auto it = transports_.begin(); it != transports_.end(); ++it) {
    if (*it == transport) {
      transports_.erase(it);
      break;
    }
  }
  // The context's connections (and their handlers) die with it: a later
  // context may be handed the same conn pointers.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second.transport == transport) {
      handlers_.erase(it->first);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = queue_.begin(); it != queue_.end();) {
    it = it->transport == transport ? queue_.erase(it) : ++it;
  }
}

size_t EventPump::Progress(Transport* transport, std::vector<Event>* out) {
  const uint32_t max = max_events_ == 0 ? 1 : max_events_;
  if (padding_ == 0) {
    events_.assign(max, ferry_event_t{});
    uint32_t n = 0;
    Status status = transport->Progress(events_.data(), max, &n);
    if (!status.ok()) {
      ADD_FAILURE() << "progress() failed: " << status.ToString();
      return 0;
    }
    if (n > max) {
      ADD_FAILURE() << "INV-6: progress() reported " << n << " events for an array of "
                    << max;
      n = max;
    }
    for (uint32_t i = 0; i < n; ++i) {
      Event e;
      if (ParseEvent(transport, &events_[i], sizeof(ferry_event_t), &e)) {
        out->push_back(std::move(e));
      }
    }
    return n;
  }

  // ABI-2 path: a bigger args struct and events strided wider than the
  // plugin's own struct, canaries in each gap and after the array.
  const size_t stride = sizeof(ferry_event_t) + padding_;
  padded_.assign(stride * max + padding_, 0);
  for (uint32_t i = 0; i < max; ++i) {
    FillCanary(padded_.data() + i * stride + sizeof(ferry_event_t), padding_);
  }
  FillCanary(padded_.data() + stride * max, padding_);
  Padded<ferry_progress_args_t> args(padding_);
  args->max_events = max;
  args->events = reinterpret_cast<ferry_event_t*>(padded_.data());
  args->event_stride = stride;
  ferry_status_t rc =
      transport->plugin().vtable()->progress(transport->context(), args.get());
  if (rc != FERRY_OK) {
    ADD_FAILURE() << "progress() with a larger args struct failed: " << StatusText(rc);
    return 0;
  }
  if (int64_t off = args.TailDamage(); off >= 0) {
    ADD_FAILURE() << "ABI-2: progress() wrote byte " << off
                  << " of ferry_progress_args_t, beyond the struct it knows ("
                  << sizeof(ferry_progress_args_t) << " bytes)";
  }
  uint32_t n = args->num_events;
  if (n > max) {
    ADD_FAILURE() << "INV-6: progress() reported " << n << " events for an array of "
                  << max;
    n = max;
  }
  for (uint32_t i = 0; i < max; ++i) {
    if (int64_t off =
            CanaryDamage(padded_.data() + i * stride + sizeof(ferry_event_t), padding_);
        off >= 0) {
      ADD_FAILURE() << "ABI-2: progress() wrote into the gap after event " << i
                    << " (byte " << sizeof(ferry_event_t) + off << " of a " << stride
                    << "-byte stride): events must be "
                       "strided by event_stride and written only up to the "
                       "plugin's own struct size";
    }
  }
  if (int64_t off = CanaryDamage(padded_.data() + stride * max, padding_); off >= 0) {
    ADD_FAILURE() << "ABI-2: progress() wrote past the end of the events "
                     "array (max_events "
                  << max << ")";
  }
  for (uint32_t i = 0; i < n; ++i) {
    Event e;
    auto* raw = reinterpret_cast<const ferry_event_t*>(padded_.data() + i * stride);
    if (ParseEvent(transport, raw, stride, &e)) out->push_back(std::move(e));
  }
  return n;
}

bool EventPump::ParseEvent(Transport* transport, const ferry_event_t* raw, size_t stride,
                           Event* out) {
  if (raw->struct_size < FERRY_STRUCT_SIZE(ferry_event_t, status) ||
      raw->struct_size > stride) {
    ADD_FAILURE() << "INV-6: event struct_size " << raw->struct_size << " is not within ["
                  << FERRY_STRUCT_SIZE(ferry_event_t, status) << ", event_stride "
                  << stride << "]";
    return false;
  }
  if (raw->type == FERRY_EV_ARRIVAL) {
    if (raw->struct_size < FERRY_EVENT_STRUCT_SIZE) {
      ADD_FAILURE() << "INV-7: ARRIVAL event with struct_size " << raw->struct_size
                    << " lacks the arrival fields";
      return false;
    }
    const uint32_t n = raw->num_segments;
    if (raw->header_len > 0 && raw->header == nullptr) {
      ADD_FAILURE() << "INV-7: ARRIVAL with header_len " << raw->header_len
                    << " but a NULL header";
      return false;
    }
    if (n > 0 &&
        (raw->segments == nullptr ||
         raw->segment_stride < FERRY_STRUCT_SIZE(ferry_arrival_segment_t, length))) {
      ADD_FAILURE() << "INV-7: ARRIVAL with " << n
                    << " segments but segments=" << raw->segments
                    << " segment_stride=" << raw->segment_stride;
      return false;
    }
  }
  // Fields are read only where the plugin's struct_size says they are.
  static_cast<testkit::EventView&>(*out) = testkit::ReadEvent(*raw);
  out->transport = transport;
  return true;
}

void EventPump::Check(Event* e) {
  const std::string what = Describe(*e);
  if (e->type < FERRY_EV_CONNECTED || e->type > FERRY_EV_CLOSED) {
    ADD_FAILURE() << "INV-6: unknown event type " << e->type;
  }
  if (e->status != FERRY_OK && e->message.empty()) {
    ADD_FAILURE() << "INV-4 (failing statuses carry a message): event " << what
                  << " has an empty message; say what failed and why";
  }
  if (e->conn == nullptr) {
    ADD_FAILURE() << "INV-6: event " << what << " has no conn";
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(e->conn);
  if (e->type == FERRY_EV_ACCEPTED) {
    if (it != conns_.end() && !it->second.closed) {
      ADD_FAILURE() << "INV-6: ACCEPTED returned conn " << e->conn
                    << ", which is already an open connection";
    }
    // A plugin may reuse a handle once it returned CLOSED for it (the ABI
    // says the handle is then invalid): this ACCEPTED names a new
    // connection, and the closed one it replaces stays closed (IsClosed).
    if (it != conns_.end() && it->second.closed) reused_after_close_.insert(e->conn);
    ConnState fresh;
    fresh.transport = e->transport;
    fresh.announced = true;
    conns_[e->conn] = fresh;
    if (e->status != FERRY_OK) {
      ADD_FAILURE() << "INV-6: ACCEPTED with status " << StatusText(e->status);
    }
    return;
  }
  if (it == conns_.end()) {
    ADD_FAILURE() << "INV-6: event " << what
                  << " names a connection the host never received from "
                     "connect() or ACCEPTED";
    return;
  }
  ConnState& c = it->second;
  if (c.closed) {
    ADD_FAILURE() << "INV-5 (CLOSED is last): event " << what
                  << " came after FERRY_EV_CLOSED for the same connection";
    return;
  }
  if (e->conn_user_data != c.user_data) {
    ADD_FAILURE() << "INV-6: event " << what << " carries conn_user_data "
                  << e->conn_user_data << "; the value set for the connection is "
                  << c.user_data
                  << " (connect()'s user_data, or the last set_conn_user_data())";
  }
  switch (e->type) {
    case FERRY_EV_CONN_BROKEN:
      if (++c.broken > 1) {
        ADD_FAILURE() << "INV-5: CONN_BROKEN delivered twice for conn " << e->conn;
      }
      if (e->status == FERRY_OK) {
        ADD_FAILURE() << "INV-5: CONN_BROKEN with status OK";
      }
      c.broken_status = e->status;
      break;
    case FERRY_EV_CLOSED: {
      if (!c.close_called) {
        ADD_FAILURE() << "INV-5: CLOSED for conn " << e->conn
                      << " which the host never close()d";
      }
      // Only posts whose call returned OK count: a send still inside its
      // call on another thread may yet be refused (close() racing posters).
      size_t pending = tracker_->Pending(e->conn, /*include_posting=*/false);
      if (pending > 0) {
        std::string list;
        for (const std::string& p : tracker_->DescribePending(e->conn, false)) {
          list += "\n    " + p;
        }
        ADD_FAILURE() << "INV-5: CLOSED returned while " << pending
                      << " operation(s) on the connection never completed "
                         "(close must complete them with FERRY_CANCELLED "
                         "first):"
                      << list;
      }
      c.closed = true;
      c.unanswered.clear();
      handlers_.erase(e->conn);
      break;
    }
    case FERRY_EV_CONNECTED:
      c.announced = true;
      break;
    case FERRY_EV_ARRIVAL:
      if (!c.announced) {
        ADD_FAILURE() << "INV-7: ARRIVAL on conn " << e->conn
                      << " before its CONNECTED was returned";
      }
      if (c.close_called) {
        ADD_FAILURE() << "INV-7: ARRIVAL on conn " << e->conn
                      << " after the host's close(): it must be dropped";
      }
      if (!c.unanswered.insert(e->msg_id).second) {
        ADD_FAILURE() << "INV-7: msg_id " << e->msg_id
                      << " reused while an arrival with that id is unanswered";
      }
      break;
    default:
      break;
  }
}

void EventPump::Dispatch(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++events_seen_;
    recent_.push_back(Describe(e));
    if (recent_.size() > kRecentEvents) recent_.pop_front();
  }
  Check(&e);
  switch (e.type) {
    case FERRY_EV_CONNECTED:
    case FERRY_EV_SEND_DONE:
    case FERRY_EV_PLACE_DONE:
      tracker_->OnCompletion(e.type, e.user_data, e.conn, e.status, e.message);
      return;
    case FERRY_EV_ARRIVAL: {
      ArrivalHandler handler;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = handlers_.find(e.conn);
        if (it != handlers_.end()) handler = it->second;
      }
      if (handler) {
        handler(e);
        return;
      }
      break;
    }
    default:
      break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(e));
}

size_t EventPump::PollOnce() {
  size_t total = 0;
  for (Transport* t : transports_) {
    std::vector<Event> batch;
    total += Progress(t, &batch);
    for (Event& e : batch) Dispatch(std::move(e));
  }
  return total;
}

size_t EventPump::PollTransport(Transport* transport, uint32_t max_events) {
  const uint32_t saved = max_events_;
  max_events_ = max_events;
  std::vector<Event> batch;
  size_t n = Progress(transport, &batch);
  max_events_ = saved;
  for (Event& e : batch) Dispatch(std::move(e));
  return n;
}

bool EventPump::WaitForWork() {
  // Sleep on the wakeup fds only when every context has one and none asks
  // to be spun; otherwise yield and let the caller spin.
  std::vector<pollfd> fds;
  for (Transport* t : transports_) {
    if (!t->HasCap(FERRY_CAP_WAKEUP_FD) || t->info().wakeup_fd < 0 ||
        t->HasCap(FERRY_CAP_BUSY_POLL)) {
      std::this_thread::yield();
      return false;
    }
    fds.push_back(pollfd{t->info().wakeup_fd, POLLIN, 0});
  }
  // A bounded wait: a wakeup fd that is never signalled only slows the
  // suite down (WAKE-* test it), it never hangs it.
  return ::poll(fds.data(), fds.size(), 10) > 0;
}

bool EventPump::RunQuietlyUntil(const std::function<bool()>& done, milliseconds timeout) {
  return testkit::PumpUntil([this] { return PollOnce(); }, done, timeout,
                            [this] { WaitForWork(); });
}

bool EventPump::RunUntil(const std::function<bool()>& done, milliseconds timeout,
                         const std::string& what) {
  if (RunQuietlyUntil(done, timeout)) return true;
  std::string pending;
  for (const std::string& p : tracker_->DescribePending()) {
    pending += "\n    " + p;
  }
  ADD_FAILURE() << "timed out after " << timeout.count() << " ms waiting for " << what
                << "\n  operations still pending:"
                << (pending.empty() ? " none" : pending) << "\n  last events:\n"
                << RecentEvents();
  return false;
}

void EventPump::Churn(int rounds) {
  for (int i = 0; i < rounds; ++i) PollOnce();
}

void EventPump::NoteConnect(Transport* transport, ferry_conn_t* conn, void* user_data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  if (it != conns_.end() && !it->second.closed) {
    ADD_FAILURE() << "INV-6: connect() returned conn " << conn
                  << ", which is already an open connection";
  }
  ConnState fresh;
  fresh.transport = transport;
  fresh.user_data = user_data;
  conns_[conn] = fresh;
}

void EventPump::NoteConnUserData(ferry_conn_t* conn, void* user_data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  if (it != conns_.end()) it->second.user_data = user_data;
}

void EventPump::NoteClose(ferry_conn_t* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  if (it != conns_.end()) it->second.close_called = true;
}

void EventPump::NoteAnswered(ferry_conn_t* conn, uint64_t msg_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  if (it != conns_.end()) it->second.unanswered.erase(msg_id);
}

Transport* EventPump::TransportOf(ferry_conn_t* conn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  return it == conns_.end() ? nullptr : it->second.transport;
}

bool EventPump::IsClosed(ferry_conn_t* conn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return false;
  if (it->second.closed) return true;
  // The handle came back with an ACCEPTED after its CLOSED: the connection
  // the host closed under it did close, and the new one has not been
  // close()d, so a test asking about this handle asks about the old one.
  return !it->second.close_called && reused_after_close_.count(conn) != 0;
}

bool EventPump::CloseCalled(ferry_conn_t* conn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  return it != conns_.end() && it->second.close_called;
}

bool EventPump::IsBroken(ferry_conn_t* conn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  return it != conns_.end() && it->second.broken > 0;
}

ferry_status_t EventPump::BrokenStatus(ferry_conn_t* conn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  return it == conns_.end() ? FERRY_OK : it->second.broken_status;
}

std::vector<ferry_conn_t*> EventPump::UnclosedConns() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ferry_conn_t*> out;
  for (const auto& [conn, c] : conns_) {
    if (!c.close_called && !c.closed) out.push_back(conn);
  }
  return out;
}

std::vector<ferry_conn_t*> EventPump::LiveConnsOf(Transport* transport) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ferry_conn_t*> out;
  for (const auto& [conn, c] : conns_) {
    if (c.transport == transport && !c.closed) out.push_back(conn);
  }
  return out;
}

std::vector<ferry_conn_t*> EventPump::ClosingConns() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ferry_conn_t*> out;
  for (const auto& [conn, c] : conns_) {
    if (c.close_called && !c.closed) out.push_back(conn);
  }
  return out;
}

std::vector<uint64_t> EventPump::UnansweredArrivals(ferry_conn_t* conn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return {};
  return std::vector<uint64_t>(it->second.unanswered.begin(),
                               it->second.unanswered.end());
}

void EventPump::SetArrivalHandler(ferry_conn_t* conn, ArrivalHandler handler) {
  std::vector<Event> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handlers_[conn] = handler;
    // Arrivals queued before the handler existed go to it now, in order.
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->type == FERRY_EV_ARRIVAL && it->conn == conn) {
        waiting.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const Event& e : waiting) handler(e);
}

void EventPump::ClearArrivalHandler(ferry_conn_t* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  handlers_.erase(conn);
}

std::optional<Event> EventPump::Take(const std::function<bool(const Event&)>& match) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (match(*it)) {
      Event e = std::move(*it);
      queue_.erase(it);
      return e;
    }
  }
  return std::nullopt;
}

bool EventPump::HasQueued(const std::function<bool(const Event&)>& match) const {
  return CountQueued(match) > 0;
}

size_t EventPump::CountQueued(const std::function<bool(const Event&)>& match) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Event& e : queue_) n += match(e) ? 1 : 0;
  return n;
}

std::string EventPump::RecentEvents() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (recent_.empty()) return "    (none)";
  std::string out;
  for (const std::string& line : recent_) out += "    " + line + "\n";
  return out;
}

uint64_t EventPump::events_seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_seen_;
}

}  // namespace ferry::conformance
