#include "fabric_test_support.h"

#include "testkit/plugin.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ferry_fabric_test {

std::shared_ptr<const ferry::Plugin> FabricPlugin() {
  auto loaded = ferry::testkit::LoadPlugin(FERRY_FABRIC_PLUGIN_DIR, "fabric");
  if (!loaded.ok()) {
    ADD_FAILURE() << "cannot load the fabric plugin from " << FERRY_FABRIC_PLUGIN_DIR
                  << ": " << loaded.status().ToString();
    return nullptr;
  }
  return loaded.value();
}

namespace {

ferry::testkit::Endpoint::Options FabricOptions(uint32_t flags) {
  ferry::testkit::Endpoint::Options o;
  o.flags = flags;
  o.instance = "fabric-test";
  return o;
}

}  // namespace

Ctx::Ctx(uint32_t flags)
    : ferry::testkit::Endpoint(FabricPlugin(), FabricOptions(flags)) {}

bool Connect(Ctx* server, Ctx* client, Link* link) {
  return ferry::testkit::Connect(client, server, "", link, reinterpret_cast<void*>(0xC0),
                                 kDeadline);
}

void CloseLink(Ctx* server, Ctx* client, const Link& link) {
  ferry::testkit::CloseLink(client, server, link, kDeadline);
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

}  // namespace ferry_fabric_test
