#include "testkit/endpoint.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <utility>

namespace ferry::testkit {

Endpoint::Endpoint(std::shared_ptr<const Plugin> plugin, Options options)
    : options_(std::move(options)),
      raw_(options_.max_events == 0 ? 1 : options_.max_events) {
  if (!plugin) {
    status_ = Status(FERRY_NOT_FOUND, "plugin not loaded");
    return;
  }
  auto opened = Transport::Open(std::move(plugin), options_.flags, options_.instance);
  if (!opened.ok()) {
    status_ = opened.status();
    return;
  }
  transport_ = std::move(opened).value();
}

Endpoint::~Endpoint() = default;

size_t Endpoint::PollOnce() {
  uint32_t n = 0;
  Status st = transport_->Progress(raw_.data(), static_cast<uint32_t>(raw_.size()), &n);
  if (options_.expect_progress_ok) {
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  if (!st.ok()) return 0;
  for (uint32_t i = 0; i < n; ++i) {
    Event e = CopyEvent(raw_[i]);
    if (options_.expect_event_messages && e.status != FERRY_OK) {
      EXPECT_FALSE(e.message.empty())
          << "a failed event without a message: " << Describe(e);
    }
    events_.push_back(std::move(e));
  }
  return n;
}

bool Endpoint::Has(int32_t type, ferry_conn_t* conn) const {
  return Count(type, conn) > 0;
}

size_t Endpoint::Count(int32_t type, ferry_conn_t* conn) const {
  size_t n = 0;
  for (const Event& e : events_) {
    if (e.type == type && (conn == nullptr || e.conn == conn)) ++n;
  }
  return n;
}

bool Endpoint::TryTake(int32_t type, Event* out, ferry_conn_t* conn) {
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (it->type == type && (conn == nullptr || it->conn == conn)) {
      *out = std::move(*it);
      events_.erase(it);
      return true;
    }
  }
  return false;
}

Event Endpoint::Take(int32_t type, ferry_conn_t* conn) {
  Event e;
  if (!TryTake(type, &e, conn)) {
    ADD_FAILURE() << "no " << EventTypeName(type) << " event waiting";
  }
  return e;
}

std::string Endpoint::Listen(const std::string& address, ferry_listener_t** out) {
  Status st = transport_->Listen(address, nullptr, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return "";
  auto addr = transport_->ListenerAddress(*out);
  EXPECT_TRUE(addr.ok()) << addr.status().ToString();
  return addr.ok() ? addr.value() : "";
}

bool PumpUntil(const std::function<size_t()>& poll, const std::function<bool()>& done,
               std::chrono::milliseconds timeout, const std::function<void()>& idle) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    if (poll() == 0 && idle && !done()) idle();
  }
  return true;
}

bool PumpUntil(std::initializer_list<Endpoint*> endpoints,
               const std::function<bool()>& done, std::chrono::milliseconds timeout,
               Idle idle) {
  auto poll_all = [&] {
    size_t n = 0;
    for (Endpoint* e : endpoints) n += e->PollOnce();
    return n;
  };
  if (idle == Idle::kSpin) return PumpUntil(poll_all, done, timeout);
  return PumpUntil(poll_all, done, timeout, [&] {
    std::vector<pollfd> fds;
    for (Endpoint* e : endpoints) {
      if (e->wakeup_fd() >= 0) fds.push_back(pollfd{e->wakeup_fd(), POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 10);
  });
}

void PumpFor(std::initializer_list<Endpoint*> endpoints,
             std::chrono::milliseconds duration) {
  const auto until = Clock::now() + duration;
  while (Clock::now() < until) {
    for (Endpoint* e : endpoints) e->PollOnce();
  }
}

bool Connect(Endpoint* client, Endpoint* server, const std::string& listen_address,
             Link* link, void* user_data, std::chrono::milliseconds timeout) {
  link->address = server->Listen(listen_address, &link->listener);
  if (link->address.empty()) return false;
  Status st = client->t().Connect(link->address, user_data, &link->client);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return false;
  const bool connected = PumpUntil(
      {client, server},
      [&] {
        return client->Has(FERRY_EV_CONNECTED, link->client) &&
               server->Has(FERRY_EV_ACCEPTED);
      },
      timeout);
  EXPECT_TRUE(connected) << "connect to " << link->address
                         << " did not complete (no CONNECTED and ACCEPTED)";
  if (!connected) return false;
  Event c = client->Take(FERRY_EV_CONNECTED, link->client);
  EXPECT_EQ(c.status, FERRY_OK) << c.message;
  link->server = server->Take(FERRY_EV_ACCEPTED).conn;
  return c.status == FERRY_OK;
}

void CloseLink(Endpoint* client, Endpoint* server, const Link& link,
               std::chrono::milliseconds timeout) {
  client->t().Close(link.client);
  server->t().Close(link.server);
  EXPECT_TRUE(PumpUntil(
      {client, server},
      [&] {
        return client->Has(FERRY_EV_CLOSED, link.client) &&
               server->Has(FERRY_EV_CLOSED, link.server);
      },
      timeout))
      << "no CLOSED after close()";
  if (link.listener != nullptr) server->t().CloseListener(link.listener);
}

ferry_segment_t Segment(const void* data, uint64_t length, int32_t device_type) {
  ferry_segment_t s{};
  s.struct_size = sizeof s;
  s.data = data;
  s.length = length;
  s.device.type = device_type;
  return s;
}

ferry_send_args_t SendArgs(const std::string& header,
                           const std::vector<ferry_segment_t>& segments,
                           void* user_data) {
  ferry_send_args_t a{};
  a.struct_size = sizeof a;
  a.header = header.data();
  a.header_len = header.size();
  a.num_segments = static_cast<uint32_t>(segments.size());
  a.segments = segments.data();
  a.segment_stride = sizeof(ferry_segment_t);
  a.user_data = user_data;
  return a;
}

ferry_place_dest_t Dest(void* data, uint64_t capacity) {
  ferry_place_dest_t d{};
  d.struct_size = sizeof d;
  d.data = data;
  d.capacity = capacity;
  d.device.type = FERRY_DEVICE_CPU;
  return d;
}

ferry_place_args_t PlaceArgs(uint64_t msg_id,
                             const std::vector<ferry_place_dest_t>& dests,
                             void* user_data) {
  ferry_place_args_t a{};
  a.struct_size = sizeof a;
  a.num_dests = static_cast<uint32_t>(dests.size());
  a.msg_id = msg_id;
  a.dests = dests.data();
  a.dest_stride = sizeof(ferry_place_dest_t);
  a.user_data = user_data;
  return a;
}

}  // namespace ferry::testkit
