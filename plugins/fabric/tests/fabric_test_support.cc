#include "fabric_test_support.h"

#include "loader/host_services.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ferry_fabric_test {

std::shared_ptr<const ferry::Plugin> FabricPlugin() {
  static std::shared_ptr<const ferry::Plugin> plugin = [] {
    ferry::LoaderOptions options;
    options.search_path = {FERRY_FABRIC_PLUGIN_DIR};
    ferry::PluginLoader loader(options);
    auto loaded = loader.Load("fabric");
    if (!loaded.ok()) {
      ADD_FAILURE() << "cannot load the fabric plugin from "
                    << FERRY_FABRIC_PLUGIN_DIR << ": " << loaded.status().ToString();
      return std::shared_ptr<const ferry::Plugin>();
    }
    return loaded.value();
  }();
  return plugin;
}

Params::Params(std::initializer_list<std::pair<std::string, std::string>> kv) {
  for (const auto& [k, v] : kv) {
    ferry::SetPluginParam("fabric", k, v);
    keys_.push_back(k);
  }
}

Params::~Params() {
  for (const std::string& k : keys_) ferry::ClearPluginParam("fabric", k);
}

Ctx::Ctx(uint32_t flags) {
  auto plugin = FabricPlugin();
  if (!plugin) {
    status_ = ferry::Status(FERRY_NOT_FOUND, "plugin not loaded");
    return;
  }
  auto opened = ferry::Transport::Open(plugin, flags, "fabric-test");
  if (!opened.ok()) {
    status_ = opened.status();
    return;
  }
  transport_ = std::move(opened).value();
}

size_t Ctx::PollOnce() {
  ferry_event_t raw[64];
  uint32_t n = 0;
  ferry::Status st = transport_->Progress(raw, 64, &n);
  EXPECT_TRUE(st.ok()) << st.ToString();
  for (uint32_t i = 0; i < n; ++i) {
    const ferry_event_t& r = raw[i];
    Event e;
    e.type = r.type;
    e.status = r.status;
    e.conn = r.conn;
    e.user_data = r.user_data;
    e.message = r.message != nullptr ? r.message : "";
    if (r.status != FERRY_OK) {
      EXPECT_FALSE(e.message.empty()) << "a failed event without a message";
    }
    if (r.type == FERRY_EV_ARRIVAL) {
      e.msg_id = r.msg_id;
      e.header.assign(static_cast<const char*>(r.header), r.header_len);
      for (uint32_t s = 0; s < r.num_segments; ++s) {
        const auto* seg = FERRY_ELEMENT_AT(const ferry_arrival_segment_t,
                                           r.segments, r.segment_stride, s);
        Event::Segment copy;
        copy.length = seg->length;
        copy.is_inline = seg->inline_data != nullptr;
        if (copy.is_inline) {
          copy.bytes.assign(static_cast<const char*>(seg->inline_data), seg->length);
        }
        e.segments.push_back(std::move(copy));
      }
    }
    events_.push_back(std::move(e));
  }
  return n;
}

bool Ctx::Has(int32_t type, ferry_conn_t* conn) const {
  for (const Event& e : events_) {
    if (e.type == type && (conn == nullptr || e.conn == conn)) return true;
  }
  return false;
}

Event Ctx::Take(int32_t type, ferry_conn_t* conn) {
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (it->type == type && (conn == nullptr || it->conn == conn)) {
      Event e = std::move(*it);
      events_.erase(it);
      return e;
    }
  }
  ADD_FAILURE() << "no event of type " << type;
  return Event();
}

bool PumpUntil(std::initializer_list<Ctx*> ctxs, const std::function<bool()>& done,
               std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    for (Ctx* c : ctxs) c->PollOnce();
  }
  return true;
}

bool Connect(Ctx* server, Ctx* client, Link* link) {
  std::string address;
  ferry::Status st = server->t().Listen("", nullptr, &link->listener);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return false;
  auto addr = server->t().ListenerAddress(link->listener);
  EXPECT_TRUE(addr.ok());
  st = client->t().Connect(addr.value(), reinterpret_cast<void*>(0xC0), &link->client);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return false;
  bool ok = PumpUntil({server, client}, [&] {
    return server->Has(FERRY_EV_ACCEPTED) && client->Has(FERRY_EV_CONNECTED, link->client);
  });
  EXPECT_TRUE(ok) << "no CONNECTED/ACCEPTED";
  if (!ok) return false;
  Event connected = client->Take(FERRY_EV_CONNECTED, link->client);
  EXPECT_EQ(connected.status, FERRY_OK) << connected.message;
  link->server = server->Take(FERRY_EV_ACCEPTED).conn;
  return connected.status == FERRY_OK;
}

void CloseLink(Ctx* server, Ctx* client, const Link& link) {
  client->t().Close(link.client);
  server->t().Close(link.server);
  EXPECT_TRUE(PumpUntil({server, client}, [&] {
    return client->Has(FERRY_EV_CLOSED, link.client) &&
           server->Has(FERRY_EV_CLOSED, link.server);
  })) << "no CLOSED";
  if (link.listener != nullptr) server->t().CloseListener(link.listener);
}

ferry::Status SendMessage(Ctx* ctx, ferry_conn_t* conn, const std::string& header,
                          const std::vector<std::pair<const void*, uint64_t>>& segs,
                          void* user_data, const std::vector<ferry_mr_t*>& mrs,
                          ferry_device_t device) {
  std::vector<ferry_segment_t> s(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    s[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    s[i].data = segs[i].first;
    s[i].length = segs[i].second;
    s[i].device = device;
    s[i].mr = i < mrs.size() ? mrs[i] : nullptr;
  }
  ferry_send_args_t a{};
  a.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
  a.num_segments = static_cast<uint32_t>(s.size());
  a.header = header.data();
  a.header_len = header.size();
  a.segments = s.data();
  a.segment_stride = sizeof(ferry_segment_t);
  a.user_data = user_data;
  for (;;) {
    ferry::Status st = ctx->t().Send(conn, a);
    if (st.code() != FERRY_UNAVAILABLE) return st;
    ctx->PollOnce();
  }
}

ferry_status_t PlaceNext(Ctx* rx, Ctx* tx, ferry_conn_t* conn,
                         const std::vector<std::pair<void*, uint64_t>>& dests,
                         Event* arrival_out, const std::vector<ferry_mr_t*>& mrs,
                         ferry_device_t device) {
  if (!PumpUntil({rx, tx}, [&] { return rx->Has(FERRY_EV_ARRIVAL, conn); })) {
    ADD_FAILURE() << "no ARRIVAL";
    return FERRY_UNKNOWN;
  }
  Event a = rx->Take(FERRY_EV_ARRIVAL, conn);
  if (arrival_out != nullptr) *arrival_out = a;
  return PlaceArrival(rx, tx, conn, a, dests, mrs, device);
}

ferry_status_t PlaceArrival(Ctx* rx, Ctx* tx, ferry_conn_t* conn, const Event& a,
                            const std::vector<std::pair<void*, uint64_t>>& dests,
                            const std::vector<ferry_mr_t*>& mrs, ferry_device_t device) {
  void* const cookie = reinterpret_cast<void*>(uintptr_t{0x91ACE});
  std::vector<ferry_place_dest_t> d(a.segments.size());
  for (size_t i = 0; i < d.size(); ++i) {
    d[i].struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
    d[i].data = i < dests.size() ? dests[i].first : nullptr;
    d[i].capacity = i < dests.size() ? dests[i].second : 0;
    d[i].device = device;
    d[i].mr = i < mrs.size() ? mrs[i] : nullptr;
  }
  ferry_place_args_t p{};
  p.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  p.num_dests = static_cast<uint32_t>(d.size());
  p.msg_id = a.msg_id;
  p.dests = d.data();
  p.dest_stride = sizeof(ferry_place_dest_t);
  p.user_data = cookie;
  ferry::Status st = rx->t().Place(conn, p);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return st.code();
  if (!PumpUntil({rx, tx}, [&] { return rx->Has(FERRY_EV_PLACE_DONE, conn); })) {
    ADD_FAILURE() << "no PLACE_DONE";
    return FERRY_UNKNOWN;
  }
  Event done = rx->Take(FERRY_EV_PLACE_DONE, conn);
  EXPECT_EQ(done.user_data, cookie);
  EXPECT_TRUE(done.status == FERRY_OK || !done.message.empty());
  return done.status;
}

void Fill(void* data, size_t n, uint64_t seed) {
  auto* p = static_cast<uint8_t*>(data);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(i ^ seed);
}

}  // namespace ferry_fabric_test
