// ABI-*: the struct_size rules, exercised on the vtable directly with
// structs as a newer host (bigger, canaries in the unknown tail) or an older
// host (smaller) would pass them; query()'s answer; optional entries.
#include "harness/conformance_test.h"

namespace ferry::conformance {
namespace {

class AbiTest : public ConformanceTest {
 protected:
  const ferry_transport_vtable_t* vt() const { return plugin()->vtable(); }
};

TEST_P(AbiTest, InitAndQueryAcceptLargerStructs) {
  Padded<ferry_init_args_t> init(64);
  init->flags = 0;
  init->instance = "abi-1";
  init->ext = nullptr;
  Padded<ferry_error_buf_t> err(64);
  char buf[256] = {0};
  err->data = buf;
  err->capacity = sizeof buf;
  ferry_context_t* ctx = nullptr;
  ferry_status_t rc = vt()->init(init.get(), &ctx, err.get());
  ASSERT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "init() with a larger ferry_init_args_t (struct_size " << init.size()
      << "): " << StatusText(rc) << " \"" << buf << "\"";
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(init.TailDamage(), -1) << "init() wrote into its (const) args";
  EXPECT_EQ(err.TailDamage(), -1);

  // A newer host's bigger info struct: filled as usual, tail untouched.
  Padded<ferry_context_info_t> big(64);
  rc = vt()->query(ctx, big.get());
  EXPECT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "query() with a larger ferry_context_info_t";
  EXPECT_EQ(big.TailDamage(), -1)
      << "query() wrote beyond the ferry_context_info_t it knows";
  EXPECT_GT(big->struct_size, 0u);
  EXPECT_LE(big->struct_size, sizeof(ferry_context_info_t))
      << "query() must set struct_size to the smaller of both sizes (its own here)";
  const ferry_context_info_t& ref = a()->info();
  EXPECT_EQ(big->max_header_size, ref.max_header_size);
  EXPECT_EQ(big->max_message_size, ref.max_message_size);
  EXPECT_EQ(big->max_segments, ref.max_segments);
  EXPECT_EQ(big->memory_kinds, ref.memory_kinds);

  // An older host's smaller struct (without domain and description): the
  // plugin writes only what fits.
  std::vector<unsigned char> raw(sizeof(ferry_context_info_t) + 64);
  auto* small = new (raw.data()) ferry_context_info_t{};
  const size_t size = FERRY_STRUCT_SIZE(ferry_context_info_t, priority);
  small->struct_size = static_cast<uint32_t>(size);
  FillCanary(raw.data() + size, raw.size() - size);
  rc = vt()->query(ctx, small);
  EXPECT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "query() with a smaller (older) ferry_context_info_t";
  int64_t off = CanaryDamage(raw.data() + size, raw.size() - size);
  EXPECT_EQ(off, -1) << "query() wrote byte " << off + static_cast<int64_t>(size)
                     << " of an info struct whose struct_size is " << size;
  EXPECT_EQ(small->max_message_size, ref.max_message_size);
  EXPECT_EQ(small->struct_size, size)
      << "query() must set struct_size to the smaller of both sizes (the host's here)";
  vt()->fini(ctx);
}

TEST_P(AbiTest, ProgressHonoursEventStride) {
  // Every progress() of this test goes through a larger args struct and a
  // wider event stride, with canaries the pump checks after each call, and a
  // small event array so events queue up inside the plugin.
  pump().SetEventPadding(40);
  pump().SetMaxEvents(3);
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* server = NewInbox(link.server);
  Inbox* client = NewInbox(link.client);
  std::vector<OutMessage*> to_server, to_client;
  for (int i = 0; i < 6; ++i) {
    to_server.push_back(NewMessage(100 + i, 8 + i, {size_t(1) << (2 * i)}));
    to_client.push_back(NewMessage(200 + i, 8, {16, 64 * kKiB}));
  }
  for (int i = 0; i < 6; ++i) {
    ASSERT_NE(Send(link.client, *to_server[i]), nullptr);
    ASSERT_NE(Send(link.server, *to_client[i]), nullptr);
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        return server->complete() == 6 && client->complete() == 6 &&
               tracker().Pending() == 0;
      },
      kOpTimeout, "12 messages through a padded progress()"));
  for (int i = 0; i < 6; ++i) {
    bool found_s = false, found_c = false;
    for (auto& m : server->messages()) found_s |= m.header == to_server[i]->header;
    for (auto& m : client->messages()) found_c |= m.header == to_client[i]->header;
    ASSERT_TRUE(found_s && found_c) << "message " << i << " missing";
  }
  for (auto& m : server->messages()) {
    for (int i = 0; i < 6; ++i) {
      if (m.header == to_server[i]->header) {
        EXPECT_TRUE(SameMessage(*to_server[i], m));
      }
    }
  }
  CloseConn(link.client);
  EXPECT_TRUE(WaitClosed(link.client));
}

TEST_P(AbiTest, PostsAcceptLargerStructsAndStrides) {
  Transport* server_t = a();
  Transport* client_t = b();
  char ebuf[256] = {0};
  Padded<ferry_error_buf_t> err(32);
  err->data = ebuf;
  err->capacity = sizeof ebuf;

  // listen() with a larger args struct.
  Padded<ferry_listen_args_t> la(48);
  la->address = "";
  la->user_data = reinterpret_cast<void*>(0x4440);
  ferry_listener_t* listener = nullptr;
  ferry_status_t rc = vt()->listen(server_t->context(), la.get(), &listener, err.get());
  ASSERT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "listen() with a larger ferry_listen_args_t: " << StatusText(rc) << " \"" << ebuf
      << "\"";
  auto address = server_t->ListenerAddress(listener);
  ASSERT_TRUE(address.ok()) << address.status().ToString();

  // connect() with a larger args struct.
  Padded<ferry_connect_args_t> ca(48);
  ca->address = address.value().c_str();
  void* connect_cookie = tracker().Begin(OpKind::kConnect, nullptr);
  ca->user_data = connect_cookie;
  ferry_conn_t* conn = nullptr;
  rc = vt()->connect(client_t->context(), ca.get(), &conn, err.get());
  ASSERT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "connect() with a larger ferry_connect_args_t: " << StatusText(rc) << " \""
      << ebuf << "\"";
  tracker().Posted(connect_cookie, conn);
  pump().NoteConnect(client_t, conn, connect_cookie);
  ferry_conn_t* accepted = nullptr;
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        if (accepted == nullptr) {
          auto e = pump().Take([&](const Event& ev) {
            return ev.type == FERRY_EV_ACCEPTED && ev.user_data == la->user_data;
          });
          if (e) accepted = e->conn;
        }
        return accepted != nullptr && tracker().Done(connect_cookie);
      },
      kOpTimeout, "CONNECTED and ACCEPTED"));
  ASSERT_EQ(StatusText(tracker().StatusOf(connect_cookie)), StatusText(FERRY_OK));

  // send() with a larger args struct and segment descriptors strided wider
  // than sizeof(ferry_segment_t), each claiming the larger struct_size.
  OutMessage* m = NewMessage(77, 24, {8, 3000, 200 * kKiB, 0});
  const size_t extra = 24;
  const size_t stride = sizeof(ferry_segment_t) + extra;
  std::vector<unsigned char> segs(stride * m->segments.size());
  for (size_t i = 0; i < m->segments.size(); ++i) {
    auto* s = new (segs.data() + i * stride) ferry_segment_t{};
    s->struct_size = static_cast<uint32_t>(stride);
    s->data = m->segments[i].data();
    s->length = m->segments[i].size();
    s->device = {FERRY_DEVICE_CPU, 0};
    FillCanary(segs.data() + i * stride + sizeof(ferry_segment_t), extra);
  }
  const uint32_t n = static_cast<uint32_t>(
      std::min<size_t>(m->segments.size(), a()->info().max_segments));
  m->segments.resize(n);
  Padded<ferry_send_args_t> sa(48);
  sa->num_segments = n;
  sa->header = m->header.data();
  sa->header_len = m->header.size();
  sa->segments = reinterpret_cast<const ferry_segment_t*>(segs.data());
  sa->segment_stride = stride;
  void* send_cookie = tracker().Begin(OpKind::kSend, conn);
  sa->user_data = send_cookie;
  rc = vt()->send(conn, sa.get(), err.get());
  if (rc == FERRY_OK) {
    tracker().Posted(send_cookie);
  } else {
    tracker().Refused(send_cookie);
  }
  ASSERT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "send() with a larger ferry_send_args_t and a " << stride
      << "-byte segment_stride: " << StatusText(rc) << " \"" << ebuf << "\"";
  EXPECT_EQ(sa.TailDamage(), -1) << "send() wrote into its (const) args";
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(CanaryDamage(segs.data() + i * stride + sizeof(ferry_segment_t), extra), -1)
        << "send() wrote into segment descriptor " << i;
  }

  // place() with a larger args struct and destinations strided wider.
  InMessage got;
  void* place_cookie = nullptr;
  Padded<ferry_place_args_t> pa(48);
  const size_t dstride = sizeof(ferry_place_dest_t) + extra;
  std::vector<unsigned char> dests;
  pump().SetArrivalHandler(accepted, [&](const Event& e) {
    got.msg_id = e.msg_id;
    got.header.assign(static_cast<const unsigned char*>(e.header),
                      static_cast<const unsigned char*>(e.header) + e.header_len);
    got.segments.resize(e.segments.size());
    got.was_inline.resize(e.segments.size());
    dests.assign(dstride * e.segments.size(), 0);
    for (size_t i = 0; i < e.segments.size(); ++i) {
      got.segments[i].resize(e.segments[i].length);
      got.was_inline[i] = e.segments[i].inline_data != nullptr;
      auto* d = new (dests.data() + i * dstride) ferry_place_dest_t{};
      d->struct_size = static_cast<uint32_t>(dstride);
      d->device = {FERRY_DEVICE_CPU, 0};
      FillCanary(dests.data() + i * dstride + sizeof(ferry_place_dest_t), extra);
      if (e.segments[i].inline_data != nullptr) {
        if (e.segments[i].length > 0) {
          std::memcpy(got.segments[i].data(), e.segments[i].inline_data,
                      e.segments[i].length);
        }
      } else if (e.segments[i].length > 0) {
        d->data = got.segments[i].data();
        d->capacity = e.segments[i].length;
      }
    }
    pa->num_dests = static_cast<uint32_t>(e.segments.size());
    pa->msg_id = e.msg_id;
    pa->dests = reinterpret_cast<const ferry_place_dest_t*>(dests.data());
    pa->dest_stride = dstride;
    place_cookie = tracker().Begin(OpKind::kPlace, e.conn);
    pa->user_data = place_cookie;
    ferry_status_t prc = vt()->place(e.conn, pa.get(), err.get());
    if (prc == FERRY_OK) {
      tracker().Posted(place_cookie);
      pump().NoteAnswered(e.conn, e.msg_id);
    } else {
      tracker().Refused(place_cookie);
      ADD_FAILURE() << "place() with a larger ferry_place_args_t and a " << dstride
                    << "-byte dest_stride: " << StatusText(prc) << " \"" << ebuf << "\"";
      place_cookie = nullptr;
    }
  });
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        return place_cookie != nullptr && tracker().Done(place_cookie) &&
               tracker().Done(send_cookie);
      },
      kOpTimeout, "the message sent and placed with padded structs"));
  EXPECT_EQ(StatusText(tracker().StatusOf(place_cookie)), StatusText(FERRY_OK));
  EXPECT_EQ(StatusText(tracker().StatusOf(send_cookie)), StatusText(FERRY_OK));
  EXPECT_TRUE(SameMessage(*m, got));
  EXPECT_EQ(pa.TailDamage(), -1) << "place() wrote into its (const) args";
  for (size_t i = 0; i * dstride < dests.size(); ++i) {
    EXPECT_EQ(
        CanaryDamage(dests.data() + i * dstride + sizeof(ferry_place_dest_t), extra), -1)
        << "place() wrote into destination descriptor " << i;
  }
  server_t->CloseListener(listener);
}

TEST_P(AbiTest, QueryReportsConsistentInfo) {
  const ferry_context_info_t& info = a()->info();
  EXPECT_GE(info.max_header_size, 64u) << "max_header_size must be at least 64";
  EXPECT_GE(info.max_segments, 1u);
  EXPECT_GT(info.max_message_size, 0u);
  EXPECT_LE(info.max_inline_size, info.max_message_size);
  EXPECT_NE(info.memory_kinds & FERRY_MEM_HOST, 0u)
      << "every transport must move host memory";
  if (a()->HasCap(FERRY_CAP_WAKEUP_FD)) {
    EXPECT_GE(info.wakeup_fd, 0) << "FERRY_CAP_WAKEUP_FD without a wakeup_fd";
  } else {
    EXPECT_EQ(info.wakeup_fd, -1) << "wakeup_fd must be -1 without FERRY_CAP_WAKEUP_FD";
  }
  if (a()->HasCap(FERRY_CAP_REGISTRATION)) {
    EXPECT_TRUE(a()->Has(FERRY_VT(reg)) && a()->Has(FERRY_VT(dereg)))
        << "FERRY_CAP_REGISTRATION without reg/dereg";
  }
  if (a()->HasCap(FERRY_CAP_DEVICE_REG_REQUIRED)) {
    EXPECT_TRUE(a()->HasCap(FERRY_CAP_REGISTRATION));
  }
  EXPECT_FALSE(a()->description().empty())
      << "description is what `ferry info` shows: say provider, mode, limits";
  // Same answer again, and the strings stay valid (owned by the context).
  ferry_context_info_t again{};
  again.struct_size = FERRY_CONTEXT_INFO_STRUCT_SIZE;
  ASSERT_EQ(plugin()->vtable()->query(a()->context(), &again), FERRY_OK);
  EXPECT_EQ(again.caps, info.caps);
  EXPECT_EQ(again.max_message_size, info.max_message_size);
  EXPECT_EQ(again.wakeup_fd, info.wakeup_fd);
  ASSERT_NE(again.description, nullptr);
  EXPECT_EQ(std::string(again.description), a()->description());
  const std::string domain = again.domain ? again.domain : "";
  EXPECT_EQ(domain, a()->domain());
  RecordProperty("caps", std::to_string(info.caps));
  RecordProperty("max_message_size", std::to_string(info.max_message_size));
}

TEST_P(AbiTest, MissingOptionalEntriesAreUnsupported) {
  struct Entry {
    const char* name;
    size_t offset;
  };
  const Entry optional[] = {{"set_conn_user_data", FERRY_VT(set_conn_user_data)},
                            {"reg", FERRY_VT(reg)},
                            {"dereg", FERRY_VT(dereg)},
                            {"conn_peer_address", FERRY_VT(conn_peer_address)}};
  for (const Entry& e : optional) {
    EXPECT_EQ(a()->Has(e.offset), VtableHas(vt(), e.offset, sizeof(void (*)())))
        << e.name;
  }
  // The presence rule on this plugin's own table: cut it before `reg`, or
  // NULL an entry, and the entry reads as absent.
  ferry_transport_vtable_t cut = *vt();
  cut.struct_size = static_cast<uint32_t>(offsetof(ferry_transport_vtable_t, reg));
  EXPECT_FALSE(VtableHas(&cut, FERRY_VT(reg), sizeof cut.reg));
  EXPECT_FALSE(
      VtableHas(&cut, FERRY_VT(conn_peer_address), sizeof cut.conn_peer_address));
  EXPECT_TRUE(VtableHas(&cut, FERRY_VT(send), sizeof cut.send));
  ferry_transport_vtable_t nulled = *vt();
  nulled.set_conn_user_data = nullptr;
  EXPECT_FALSE(
      VtableHas(&nulled, FERRY_VT(set_conn_user_data), sizeof nulled.set_conn_user_data));

  Link link;
  ASSERT_TRUE(MakeLink(&link));
  // Each optional entry: absent => the wrapper says UNIMPLEMENTED with a
  // message (or does nothing, for void entries); present => it works.
  if (a()->Has(FERRY_VT(reg))) {
    std::vector<unsigned char> buf(4 * kKiB, 1);
    ferry_reg_args_t ra{};
    ra.struct_size = FERRY_REG_ARGS_STRUCT_SIZE;
    ra.access = FERRY_ACCESS_SEND | FERRY_ACCESS_RECV;
    ra.data = buf.data();
    ra.length = buf.size();
    ra.device = {FERRY_DEVICE_CPU, 0};
    ferry_mr_t* mr = nullptr;
    Status s = a()->Reg(ra, &mr);
    EXPECT_TRUE(s.ok()) << "reg() of 4 KiB of host memory: " << s.ToString();
    if (s.ok() && a()->Has(FERRY_VT(dereg))) a()->Dereg(mr);
  } else {
    ferry_reg_args_t ra{};
    ra.struct_size = FERRY_REG_ARGS_STRUCT_SIZE;
    ferry_mr_t* mr = nullptr;
    Status s = a()->Reg(ra, &mr);
    EXPECT_EQ(StatusText(s.code()), StatusText(FERRY_UNIMPLEMENTED)) << s.ToString();
    EXPECT_FALSE(s.message().empty());
    a()->Dereg(nullptr);  // absent: a no-op, never a call through NULL
  }
  auto peer = b()->PeerAddress(link.client);
  if (b()->Has(FERRY_VT(conn_peer_address))) {
    EXPECT_TRUE(peer.ok()) << peer.status().ToString();
    if (peer.ok()) {
      EXPECT_FALSE(peer.value().empty());
    }
  } else {
    EXPECT_EQ(StatusText(peer.status().code()), StatusText(FERRY_UNIMPLEMENTED));
    EXPECT_FALSE(peer.status().message().empty());
  }
  if (!a()->Has(FERRY_VT(set_conn_user_data))) {
    a()->SetConnUserData(link.server, reinterpret_cast<void*>(0x1230));
  }
  RecordProperty(
      "optional_entries",
      std::string(a()->Has(FERRY_VT(set_conn_user_data)) ? "set_conn_user_data " : "") +
          (a()->Has(FERRY_VT(reg)) ? "reg " : "") +
          (a()->Has(FERRY_VT(dereg)) ? "dereg " : "") +
          (a()->Has(FERRY_VT(conn_peer_address)) ? "conn_peer_address" : ""));
}

INSTANTIATE_TEST_SUITE_P(Plugins, AbiTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
