// Behaviour specific to the tcp transport, seen through the production
// loader and ferry::Transport: address families, busy-poll mode, large
// placed payloads, back-pressure, malformed and truncated streams from raw
// sockets, dead peers, argument checks, wakeup fd, cleanup. The contracts
// every plugin owes (exactly once, never inline, ordering, cancel on close,
// SIGKILLed peers) are checked by conformance/.
#include "tcp_test_support.h"

#include "loader/host_services.h"
#include "wire.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <poll.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace ferry_tcp_test {
namespace {

namespace wire = ferry_tcp::wire;

void* Cookie(uintptr_t v) {
  return reinterpret_cast<void*>(v);
}

std::string AsString(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

size_t OpenFdCount() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// --- identity ------------------------------------------------------------------

TEST(TcpPlugin, QueryReportsCapabilitiesAndLimits) {
  Endpoint e;
  const ferry_context_info_t& info = e.t().info();
  EXPECT_EQ(e.t().name(), "tcp");
  for (uint64_t cap : {FERRY_CAP_WAKEUP_FD, FERRY_CAP_DETECTS_PEER_DEATH,
                       FERRY_CAP_ORDERED, FERRY_CAP_THREAD_SAFE}) {
    EXPECT_TRUE(e.t().HasCap(cap)) << "missing cap " << cap;
  }
  EXPECT_FALSE(e.t().HasCap(FERRY_CAP_BUSY_POLL));
  EXPECT_EQ(info.memory_kinds, FERRY_MEM_HOST);
  EXPECT_EQ(info.priority, 10);
  EXPECT_EQ(e.t().domain(), "");
  EXPECT_GE(info.wakeup_fd, 0);
  EXPECT_EQ(info.max_inline_size, 16u * 1024);
  EXPECT_GE(info.max_header_size, 64u);
  EXPECT_GE(info.max_message_size, uint64_t{1} << 32);
  EXPECT_NE(e.t().description().find("sleeping"), std::string::npos)
      << e.t().description();
}

// --- addresses -----------------------------------------------------------------

TEST(TcpPlugin, ListenAddressForms) {
  Endpoint e;
  ferry_listener_t* l = nullptr;
  std::string a = e.Listen("", &l);
  EXPECT_EQ(a.rfind("127.0.0.1:", 0), 0u) << a;  // loopback by default
  EXPECT_NE(a, "127.0.0.1:0");
  e.t().CloseListener(l);

  a = e.Listen("localhost:0", &l);
  EXPECT_EQ(a.rfind("127.0.0.1:", 0), 0u) << a;
  e.t().CloseListener(l);

  struct Bad {
    const char* address;
    const char* says;
  };
  for (Bad bad : {Bad{"example.invalid:80", "numeric"}, Bad{"::1:5000", "brackets"},
                  Bad{"127.0.0.1:99999", "port"}, Bad{"[::1", "']'"}}) {
    ferry_listener_t* none = nullptr;
    ferry::Status st = e.t().Listen(bad.address, nullptr, &none);
    EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << bad.address;
    EXPECT_NE(st.message().find(bad.says), std::string::npos) << st.message();
  }
  ferry_conn_t* c = nullptr;
  ferry::Status st = e.t().Connect("127.0.0.1", nullptr, &c);
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << st.message();
}

// --- round trips -------------------------------------------------------------

// A request with an inline and a placed segment, answered by a small reply.
void RoundTrip(Endpoint* client, Endpoint* server, const Link& link) {
  std::vector<uint8_t> small = Pattern(64, 1);
  std::vector<uint8_t> big = Pattern(100 * 1024, 2);  // above inline size
  std::vector<ferry_segment_t> segs = {Segment(small.data(), small.size()),
                                       Segment(big.data(), big.size())};
  ASSERT_TRUE(client->t().Send(link.client, SendArgs("request", segs, Cookie(1))).ok());

  ASSERT_TRUE(PumpUntil({client, server}, [&] { return server->Has(FERRY_EV_ARRIVAL); }));
  Event in = server->Take(FERRY_EV_ARRIVAL, link.server);
  EXPECT_EQ(in.header, "request");
  ASSERT_EQ(in.segments.size(), 2u);
  EXPECT_TRUE(in.segments[0].is_inline);
  EXPECT_EQ(in.segments[0].bytes, AsString(small));
  EXPECT_FALSE(in.segments[1].is_inline);
  EXPECT_EQ(in.segments[1].length, big.size());
  EXPECT_EQ(in.segments[1].device.type, FERRY_DEVICE_CPU);

  std::vector<uint8_t> landing(big.size());
  std::vector<ferry_place_dest_t> dests = {Dest(nullptr, 0),
                                           Dest(landing.data(), landing.size())};
  ASSERT_TRUE(
      server->t().Place(link.server, PlaceArgs(in.msg_id, dests, Cookie(2))).ok());
  ASSERT_TRUE(PumpUntil({client, server}, [&] {
    return server->Has(FERRY_EV_PLACE_DONE) && client->Has(FERRY_EV_SEND_DONE);
  }));
  Event placed = server->Take(FERRY_EV_PLACE_DONE, link.server);
  EXPECT_EQ(placed.status, FERRY_OK) << placed.message;
  EXPECT_EQ(placed.user_data, Cookie(2));
  EXPECT_EQ(landing, big);
  Event sent = client->Take(FERRY_EV_SEND_DONE, link.client);
  EXPECT_EQ(sent.status, FERRY_OK) << sent.message;
  EXPECT_EQ(sent.user_data, Cookie(1));

  ASSERT_TRUE(server->t().Send(link.server, SendArgs("reply", {}, Cookie(3))).ok());
  ASSERT_TRUE(PumpUntil({client, server}, [&] { return client->Has(FERRY_EV_ARRIVAL); }));
  Event reply = client->Take(FERRY_EV_ARRIVAL, link.client);
  EXPECT_EQ(reply.header, "reply");
  EXPECT_TRUE(client->t().Discard(link.client, reply.msg_id).ok());
  ASSERT_TRUE(
      PumpUntil({client, server}, [&] { return server->Has(FERRY_EV_SEND_DONE); }));
  EXPECT_EQ(server->Take(FERRY_EV_SEND_DONE).user_data, Cookie(3));
}

class TcpFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(TcpFamily, RoundTrip) {
  std::string listen = GetParam();
  if (listen[0] == '[' && !HaveIpv6Loopback()) {
    GTEST_SKIP() << "IPv6 loopback [::1] cannot be bound on this machine";
  }
  Endpoint client, server;
  Link link = Connect(&client, &server, listen);
  if (listen[0] == '[') {
    EXPECT_EQ(link.address.rfind("[::1]:", 0), 0u) << link.address;
  } else {
    EXPECT_EQ(link.address.rfind("127.0.0.1:", 0), 0u) << link.address;
  }
  auto peer = client.t().PeerAddress(link.client);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer.value(), link.address);
  server.t().SetConnUserData(link.server, Cookie(77));
  RoundTrip(&client, &server, link);
  RoundTrip(&client, &server, link);  // and again on the same connection
  CloseLink(&client, &server, link);
}

INSTANTIATE_TEST_SUITE_P(AddressFamilies, TcpFamily,
                         ::testing::Values("127.0.0.1:0", "[::1]:0"),
                         [](const auto& param_info) {
                           return std::string(param_info.param[0] == '[' ? "IPv6"
                                                                         : "IPv4");
                         });

TEST(TcpPlugin, BusyPollRoundTrip) {
  Endpoint client(FERRY_INIT_BUSY_POLL), server(FERRY_INIT_BUSY_POLL);
  ASSERT_TRUE(client.t().HasCap(FERRY_CAP_BUSY_POLL));
  EXPECT_NE(client.t().description().find("busy-poll"), std::string::npos);
  Link link = Connect(&client, &server);
  RoundTrip(&client, &server, link);
  // A run of small ping-pongs on the busy path.
  std::vector<uint8_t> payload = Pattern(64, 9);
  for (int i = 0; i < 2000; ++i) {
    std::vector<ferry_segment_t> segs = {Segment(payload.data(), payload.size())};
    ASSERT_TRUE(client.t().Send(link.client, SendArgs("", segs, nullptr)).ok());
    ASSERT_TRUE(
        PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
    Event ping = server.Take(FERRY_EV_ARRIVAL);
    ASSERT_EQ(ping.segments.at(0).bytes, AsString(payload));
    ASSERT_TRUE(server.t().Discard(link.server, ping.msg_id).ok());
    ASSERT_TRUE(server.t().Send(link.server, SendArgs("", segs, nullptr)).ok());
    ASSERT_TRUE(
        PumpUntil({&client, &server}, [&] { return client.Has(FERRY_EV_ARRIVAL); }));
    ASSERT_TRUE(
        client.t().Discard(link.client, client.Take(FERRY_EV_ARRIVAL).msg_id).ok());
    client.events().clear();
    server.events().clear();
  }
  CloseLink(&client, &server, link);
}

TEST(TcpPlugin, BusyPollLargeMessageStreamsThroughFullSocketBuffers) {
  // 16 MiB through 256 KiB loopback socket buffers: the sender's sendmsg()
  // blocks many times and busy-poll mode retries it on every spin.
  Endpoint client(FERRY_INIT_BUSY_POLL), server(FERRY_INIT_BUSY_POLL);
  EXPECT_NE(client.t().description().find("262144 B to peers on this host"),
            std::string::npos)
      << client.t().description();
  Link link = Connect(&client, &server);
  const size_t kSize = 16u << 20;
  std::vector<uint8_t> payload = Pattern(kSize, 11);
  std::vector<ferry_segment_t> segs = {Segment(payload.data(), kSize)};
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("big", segs, Cookie(1))).ok());
  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  Event in = server.Take(FERRY_EV_ARRIVAL);
  ASSERT_EQ(in.segments.size(), 1u);
  EXPECT_FALSE(in.segments[0].is_inline);
  std::vector<uint8_t> landing(kSize);
  std::vector<ferry_place_dest_t> dests = {Dest(landing.data(), kSize)};
  ASSERT_TRUE(server.t().Place(link.server, PlaceArgs(in.msg_id, dests, Cookie(2))).ok());
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    return server.Has(FERRY_EV_PLACE_DONE) && client.Has(FERRY_EV_SEND_DONE);
  }));
  EXPECT_EQ(server.Take(FERRY_EV_PLACE_DONE).status, FERRY_OK);
  EXPECT_EQ(client.Take(FERRY_EV_SEND_DONE).user_data, Cookie(1));
  EXPECT_TRUE(landing == payload) << "placed bytes differ from the sent ones";
  CloseLink(&client, &server, link);
}

TEST(TcpPlugin, BusyPollWritesALoneSendAtOnceAndABurstAtTheNextProgress) {
  Endpoint client(FERRY_INIT_BUSY_POLL), server(FERRY_INIT_BUSY_POLL);
  Link link = Connect(&client, &server);
  client.PollOnce();  // a fresh progress(): the next send is the first since
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("lone", {}, Cookie(1))).ok());
  // On the wire without another progress() by the client.
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  Event lone = server.Take(FERRY_EV_ARRIVAL);
  EXPECT_EQ(lone.header, "lone");
  ASSERT_TRUE(server.t().Discard(link.server, lone.msg_id).ok());

  // A burst posted back to back: the first is written at once, the rest
  // wait for the client's next progress() and go out together.
  constexpr int kBurst = 100;
  client.PollOnce();
  for (int i = 0; i < kBurst; ++i) {
    const std::string h = "burst " + std::to_string(i);
    ASSERT_TRUE(client.t().Send(link.client, SendArgs(h, {}, Cookie(100 + i))).ok());
  }
  std::vector<std::string> got;
  auto drain_server = [&] {
    while (server.Has(FERRY_EV_ARRIVAL)) {
      Event e = server.Take(FERRY_EV_ARRIVAL);
      got.push_back(e.header);
      EXPECT_TRUE(server.t().Discard(link.server, e.msg_id).ok());
    }
  };
  ASSERT_TRUE(PumpUntil({&server}, [&] {
    drain_server();
    return !got.empty();
  }));
  PumpFor({&server}, std::chrono::milliseconds(100));
  drain_server();
  EXPECT_EQ(got, std::vector<std::string>{"burst 0"})
      << "a send posted right after another went out before the next progress()";
  // The client's next progress() sends the rest, in order.
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    drain_server();
    return got.size() == kBurst + 0u && client.Count(FERRY_EV_SEND_DONE) == kBurst + 1u;
  }));
  for (int i = 0; i < kBurst; ++i) EXPECT_EQ(got[i], "burst " + std::to_string(i));
  EXPECT_EQ(client.Take(FERRY_EV_SEND_DONE).user_data, Cookie(1));
  for (int i = 0; i < kBurst; ++i) {
    EXPECT_EQ(client.Take(FERRY_EV_SEND_DONE).user_data, Cookie(100 + i));
  }
  CloseLink(&client, &server, link);
}

TEST(TcpPlugin, BusyPollCloseCancelsASendHeldForTheNextProgress) {
  Endpoint client(FERRY_INIT_BUSY_POLL), server(FERRY_INIT_BUSY_POLL);
  Link link = Connect(&client, &server);
  client.PollOnce();
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("written", {}, Cookie(1))).ok());
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("held", {}, Cookie(2))).ok());
  client.t().Close(link.client);  // before the progress() that would send it
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    return client.Has(FERRY_EV_CLOSED) && client.Count(FERRY_EV_SEND_DONE) == 2;
  }));
  Event written = client.Take(FERRY_EV_SEND_DONE);
  EXPECT_EQ(written.user_data, Cookie(1));
  EXPECT_EQ(written.status, FERRY_OK);
  Event held = client.Take(FERRY_EV_SEND_DONE);
  EXPECT_EQ(held.user_data, Cookie(2));
  EXPECT_EQ(held.status, FERRY_CANCELLED) << held.message;
  // More progress after the connection was freed touches nothing of it
  // (ASan: scripts/sanitize.sh address).
  PumpFor({&client, &server}, std::chrono::milliseconds(20));
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  EXPECT_EQ(server.Take(FERRY_EV_ARRIVAL).header, "written");
  server.t().Close(link.server);
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_CLOSED); }));
}

TEST(TcpPlugin, BusyPollServesConnectionsBeyondTheDirectlyReadOnes) {
  // Busy-poll mode reads its first 8 open connections directly and takes
  // them out of epoll; the rest stay in epoll. Messages in both directions
  // on all 12, then a peer closing one of each kind: both are reported.
  Endpoint client(FERRY_INIT_BUSY_POLL), server(FERRY_INIT_BUSY_POLL);
  constexpr int kLinks = 12;
  std::vector<Link> links;
  for (int i = 0; i < kLinks; ++i) links.push_back(Connect(&client, &server));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kLinks; ++i) {
      const std::string h = "ping " + std::to_string(i);
      ASSERT_TRUE(client.t().Send(links[i].client, SendArgs(h, {}, nullptr)).ok());
    }
    ASSERT_TRUE(PumpUntil({&client, &server},
                          [&] { return server.Count(FERRY_EV_ARRIVAL) == kLinks; }));
    for (int i = 0; i < kLinks; ++i) {
      Event ping = server.Take(FERRY_EV_ARRIVAL, links[i].server);
      EXPECT_EQ(ping.header, "ping " + std::to_string(i));
      ASSERT_TRUE(server.t().Discard(links[i].server, ping.msg_id).ok());
      ASSERT_TRUE(
          server.t().Send(links[i].server, SendArgs(ping.header, {}, nullptr)).ok());
    }
    ASSERT_TRUE(PumpUntil({&client, &server},
                          [&] { return client.Count(FERRY_EV_ARRIVAL) == kLinks; }));
    for (int i = 0; i < kLinks; ++i) {
      Event pong = client.Take(FERRY_EV_ARRIVAL, links[i].client);
      EXPECT_EQ(pong.header, "ping " + std::to_string(i));
      ASSERT_TRUE(client.t().Discard(links[i].client, pong.msg_id).ok());
    }
    client.events().clear();
    server.events().clear();
  }
  for (int i : {0, kLinks - 1}) server.t().Close(links[i].server);
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    return client.Has(FERRY_EV_CONN_BROKEN, links[0].client) &&
           client.Has(FERRY_EV_CONN_BROKEN, links[kLinks - 1].client);
  }));
  for (int i : {0, kLinks - 1}) {
    EXPECT_EQ(client.Take(FERRY_EV_CONN_BROKEN, links[i].client).status, FERRY_PEER_GONE);
    client.t().Close(links[i].client);
  }
  for (int i = 1; i < kLinks - 1; ++i) CloseLink(&client, &server, links[i]);
}

TEST(TcpPlugin, BusyPollFromParameter) {
  ferry::SetPluginParam("tcp", "busy_poll", "1");
  Endpoint e;
  ferry::ClearPluginParam("tcp", "busy_poll");
  EXPECT_TRUE(e.t().HasCap(FERRY_CAP_BUSY_POLL));
  // Busy-poll contexts keep their wakeup fd readable: the host spins.
  pollfd p{e.t().info().wakeup_fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 1);
}

// --- large payloads, placement, discard --------------------------------------

TEST(TcpPlugin, LargeMessageLandsInTheReceiverBuffer) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  const size_t kSize = 64u << 20;
  std::vector<uint8_t> payload = Pattern(kSize, 3);
  std::vector<ferry_segment_t> segs = {Segment(payload.data(), kSize)};
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("tensor", segs, nullptr)).ok());
  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  Event in = server.Take(FERRY_EV_ARRIVAL);
  ASSERT_EQ(in.segments.size(), 1u);
  EXPECT_EQ(in.segments[0].length, kSize);
  EXPECT_FALSE(in.segments[0].is_inline);
  std::vector<uint8_t> landing(kSize);
  std::vector<ferry_place_dest_t> dests = {Dest(landing.data(), kSize)};
  ASSERT_TRUE(server.t().Place(link.server, PlaceArgs(in.msg_id, dests, nullptr)).ok());
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    return server.Has(FERRY_EV_PLACE_DONE) && client.Has(FERRY_EV_SEND_DONE);
  }));
  EXPECT_EQ(server.Take(FERRY_EV_PLACE_DONE).status, FERRY_OK);
  EXPECT_EQ(client.Take(FERRY_EV_SEND_DONE).status, FERRY_OK);
  EXPECT_TRUE(landing == payload) << "placed bytes differ from the sent ones";
  CloseLink(&client, &server, link);
}

TEST(TcpPlugin, DiscardAndNullDestinationsSkipOnlyTheirBytes) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  std::vector<uint8_t> a = Pattern(8u << 20, 4), b = Pattern(40000, 5),
                       c = Pattern(50000, 6), d = Pattern(30000, 7);
  // 1: discarded whole. 2: middle segment dropped. 3: all checked.
  std::vector<ferry_segment_t> m1 = {Segment(a.data(), a.size())};
  std::vector<ferry_segment_t> m2 = {Segment(b.data(), b.size()),
                                     Segment(c.data(), c.size()),
                                     Segment(d.data(), d.size())};
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("one", m1, nullptr)).ok());
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("two", m2, nullptr)).ok());
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("three", m2, nullptr)).ok());

  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  Event one = server.Take(FERRY_EV_ARRIVAL);
  EXPECT_EQ(one.header, "one");
  ASSERT_TRUE(server.t().Discard(link.server, one.msg_id).ok());
  EXPECT_EQ(server.t().Discard(link.server, one.msg_id).code(), FERRY_INVALID_ARGUMENT);

  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  Event two = server.Take(FERRY_EV_ARRIVAL);
  EXPECT_EQ(two.header, "two");
  std::vector<uint8_t> lb(b.size()), ld(d.size());
  std::vector<ferry_place_dest_t> dests = {Dest(lb.data(), lb.size()), Dest(nullptr, 0),
                                           Dest(ld.data(), ld.size())};
  ASSERT_TRUE(server.t().Place(link.server, PlaceArgs(two.msg_id, dests, nullptr)).ok());
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    return server.Has(FERRY_EV_PLACE_DONE) && server.Has(FERRY_EV_ARRIVAL);
  }));
  EXPECT_EQ(server.Take(FERRY_EV_PLACE_DONE).status, FERRY_OK);
  EXPECT_EQ(lb, b);
  EXPECT_EQ(ld, d);

  Event three = server.Take(FERRY_EV_ARRIVAL);
  EXPECT_EQ(three.header, "three");
  std::vector<uint8_t> lb3(b.size()), lc3(c.size()), ld3(d.size());
  dests = {Dest(lb3.data(), lb3.size()), Dest(lc3.data(), lc3.size()),
           Dest(ld3.data(), ld3.size())};
  ASSERT_TRUE(
      server.t().Place(link.server, PlaceArgs(three.msg_id, dests, nullptr)).ok());
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    return server.Has(FERRY_EV_PLACE_DONE) && client.Count(FERRY_EV_SEND_DONE) == 3;
  }));
  EXPECT_EQ(lb3, b);
  EXPECT_EQ(lc3, c);
  EXPECT_EQ(ld3, d);
  CloseLink(&client, &server, link);
}

// --- back-pressure -------------------------------------------------------------

TEST(TcpPlugin, UnansweredArrivalHoldsBackTheSender) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  constexpr int kMessages = 16;
  const size_t kSize = 4u << 20;  // 64 MiB in all: far beyond socket buffers
  std::vector<std::vector<uint8_t>> payloads;
  for (int i = 0; i < kMessages; ++i) payloads.push_back(Pattern(kSize, 100 + i));
  for (int i = 0; i < kMessages; ++i) {
    std::vector<ferry_segment_t> segs = {Segment(payloads[i].data(), kSize)};
    ASSERT_TRUE(client.t()
                    .Send(link.client, SendArgs(std::to_string(i), segs, Cookie(i + 1)))
                    .ok());
  }
  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  // Not answering: the receiver stops reading, so the sender stalls.
  PumpFor({&client, &server}, std::chrono::milliseconds(300));
  EXPECT_EQ(server.Count(FERRY_EV_ARRIVAL), 1u);
  EXPECT_LT(client.Count(FERRY_EV_SEND_DONE), static_cast<size_t>(kMessages));
  for (const Event& e : client.events()) EXPECT_EQ(e.status, FERRY_OK) << e.message;

  // Answer everything: all arrive, in order, intact; every send completes.
  std::vector<std::vector<uint8_t>> landed(kMessages, std::vector<uint8_t>(kSize));
  int next = 0;
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    while (server.Has(FERRY_EV_ARRIVAL)) {
      Event in = server.Take(FERRY_EV_ARRIVAL);
      EXPECT_EQ(in.header, std::to_string(next));
      std::vector<ferry_place_dest_t> dests = {Dest(landed[next].data(), kSize)};
      EXPECT_TRUE(
          server.t().Place(link.server, PlaceArgs(in.msg_id, dests, nullptr)).ok());
      ++next;
    }
    return server.Count(FERRY_EV_PLACE_DONE) == kMessages &&
           client.Count(FERRY_EV_SEND_DONE) == kMessages;
  }));
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_TRUE(landed[i] == payloads[i]) << "message " << i;
    EXPECT_EQ(client.events()[i].user_data, Cookie(i + 1)) << "send order";
  }
  CloseLink(&client, &server, link);
}

// Thousands of small messages queued behind a full socket buffer: flushed
// in gathers that start small after the buffer was found full and grow
// while everything gathered goes out. All arrive, in order, and every send
// completes in order.
TEST(TcpPlugin, BacklogOfSmallSendsBehindAFullSocketArrivesInOrder) {
  // Busy-poll: the sender retries the full socket on every progress().
  Endpoint client(FERRY_INIT_BUSY_POLL), server;
  Link link = Connect(&client, &server);
  const size_t kBig = 8u << 20;  // fills both socket buffers
  std::vector<uint8_t> big = Pattern(kBig, 7);
  std::vector<ferry_segment_t> big_seg = {Segment(big.data(), kBig)};
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("big", big_seg, Cookie(1))).ok());
  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  constexpr int kSmall = 20000;
  const std::vector<uint8_t> small = Pattern(48, 9);
  for (int i = 0; i < kSmall; ++i) {
    std::vector<ferry_segment_t> segs = {Segment(small.data(), small.size())};
    ASSERT_TRUE(client.t()
                    .Send(link.client, SendArgs(std::to_string(i), segs, Cookie(i + 2)))
                    .ok());
  }
  PumpFor({&client, &server},
          std::chrono::milliseconds(100));  // spins on the full socket
  EXPECT_EQ(client.Count(FERRY_EV_SEND_DONE), 0u);

  std::vector<uint8_t> landed(kBig);
  Event first = server.Take(FERRY_EV_ARRIVAL);
  std::vector<ferry_place_dest_t> dests = {Dest(landed.data(), kBig)};
  ASSERT_TRUE(
      server.t().Place(link.server, PlaceArgs(first.msg_id, dests, nullptr)).ok());
  int next = 0;
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    while (server.Has(FERRY_EV_ARRIVAL)) {
      Event in = server.Take(FERRY_EV_ARRIVAL);
      EXPECT_EQ(in.header, std::to_string(next));
      EXPECT_TRUE(server.t().Discard(link.server, in.msg_id).ok());
      ++next;
    }
    return next == kSmall && client.Count(FERRY_EV_SEND_DONE) == kSmall + 1;
  }));
  EXPECT_TRUE(landed == big);
  for (int i = 0; i < kSmall + 1; ++i) {
    ASSERT_EQ(client.events()[i].user_data, Cookie(i + 1)) << "send order";
  }
  CloseLink(&client, &server, link);
}

// --- malformed streams ---------------------------------------------------------

struct BadStream {
  const char* name;
  std::string bytes;
  ferry_status_t status;
  const char* says;
};

class TcpMalformed : public ::testing::TestWithParam<BadStream> {};

TEST_P(TcpMalformed, BreaksOnlyThatConnection) {
  Endpoint client, server;
  Link good = Connect(&client, &server);

  RawSocket raw = RawSocket::ConnectTo(good.address);
  raw.SendAll(GetParam().bytes);
  ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
    return server.Has(FERRY_EV_ACCEPTED) && server.Has(FERRY_EV_CONN_BROKEN);
  }));
  ferry_conn_t* bad = server.Take(FERRY_EV_ACCEPTED).conn;
  Event broken = server.Take(FERRY_EV_CONN_BROKEN, bad);
  EXPECT_EQ(broken.status, GetParam().status) << broken.message;
  EXPECT_NE(broken.message.find(GetParam().says), std::string::npos) << broken.message;
  EXPECT_FALSE(server.Has(FERRY_EV_ARRIVAL)) << "nothing reached the host";
  // The peer sees its connection dropped.
  std::string junk;
  ASSERT_TRUE(PumpUntil({&server}, [&] { return !raw.ReadAvailable(&junk); }));

  // A send on the broken conn is refused; the good connection still works.
  EXPECT_FALSE(server.t().Send(bad, SendArgs("x", {}, nullptr)).ok());
  server.t().Close(bad);
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_CLOSED, bad); }));
  RoundTrip(&client, &server, good);
  CloseLink(&client, &server, good);
}

std::string Prefix(uint32_t header_len, uint32_t num_segments, uint64_t payload) {
  wire::Prefix p;
  p.header_len = header_len;
  p.num_segments = num_segments;
  p.payload_bytes = payload;
  std::string out(wire::kPrefixSize, '\0');
  wire::EncodePrefix(p, out.data());
  return out;
}

std::vector<BadStream> BadStreams() {
  std::string bad_magic = FrameBytes("hi", {});
  bad_magic[0] = 'X';
  std::string lying_table = FrameBytes("", {{"abc", true}});
  wire::Put64(lying_table.data() + wire::kPrefixSize, 1000);  // length 1000 != 3
  std::string fat_inline = Prefix(0, 1, 1u << 20);
  std::string entry(wire::kSegmentEntrySize, '\0');
  wire::SegmentEntry e;
  e.length = 1u << 20;
  e.flags = wire::kSegmentInline;  // 1 MiB "inline": above the receiver's limit
  wire::EncodeSegment(e, entry.data());
  fat_inline += entry;
  return {
      {"NotFerry", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", FERRY_DATA_LOSS,
       "not a ferry tcp endpoint"},
      {"WireVersion", HelloBytes(99), FERRY_INCOMPATIBLE, "version 99"},
      {"BadMagic", HelloBytes() + bad_magic, FERRY_DATA_LOSS, "magic"},
      {"HugeHeader", HelloBytes() + Prefix(0xFFFFFFFFu, 0, 0), FERRY_DATA_LOSS,
       "max_header_size"},
      {"TooManySegments", HelloBytes() + Prefix(0, 1u << 30, 0), FERRY_DATA_LOSS,
       "max_segments"},
      {"HugeMessage", HelloBytes() + Prefix(0, 0, uint64_t{1} << 62), FERRY_DATA_LOSS,
       "max_message_size"},
      {"LyingTable", HelloBytes() + lying_table, FERRY_DATA_LOSS, "payload"},
      {"FatInline", HelloBytes() + fat_inline, FERRY_DATA_LOSS, "inline"},
  };
}

INSTANTIATE_TEST_SUITE_P(Streams, TcpMalformed, ::testing::ValuesIn(BadStreams()),
                         [](const auto& param_info) {
                           return std::string(param_info.param.name);
                         });

// --- what goes on the wire ------------------------------------------------------

TEST(TcpPlugin, FramesOnTheWireAreWhatWireHSays) {
  // Small all-inline messages are assembled in one buffer and sent with
  // send(); others go out as an iovec list. Either way the bytes must be
  // exactly the version-1 layout.
  Endpoint server;
  ferry_listener_t* l = nullptr;
  std::string address = server.Listen("127.0.0.1:0", &l);
  RawSocket raw = RawSocket::ConnectTo(address);
  raw.SendAll(HelloBytes());
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_ACCEPTED); }));
  ferry_conn_t* conn = server.Take(FERRY_EV_ACCEPTED).conn;

  std::vector<uint8_t> p100 = Pattern(100, 1), p20000 = Pattern(20000, 2),
                       p10 = Pattern(10, 3), p200 = Pattern(200, 4);
  std::string h900(900, 'h');
  const char abc[] = "abc";
  // 1: three inline segments, one of them empty: one contiguous frame.
  ASSERT_TRUE(server.t()
                  .Send(conn, SendArgs("hdr",
                                       {Segment(abc, 3), Segment(nullptr, 0),
                                        Segment(p100.data(), 100)},
                                       Cookie(1)))
                  .ok());
  // 2: a placed segment before an inline one: inline bytes go first.
  ASSERT_TRUE(
      server.t()
          .Send(conn,
                SendArgs("", {Segment(p20000.data(), 20000), Segment(p10.data(), 10)},
                         Cookie(2)))
          .ok());
  // 3: all inline but above the one-buffer size.
  ASSERT_TRUE(
      server.t().Send(conn, SendArgs(h900, {Segment(p200.data(), 200)}, Cookie(3))).ok());
  std::string expected =
      FrameBytes("hdr", {{"abc", true}, {"", true}, {AsString(p100), true}}) +
      FrameBytes("", {{AsString(p20000), false}, {AsString(p10), true}}) +
      FrameBytes(h900, {{AsString(p200), true}});
  std::string got;
  ASSERT_TRUE(PumpUntil({&server}, [&] {
    raw.ReadAvailable(&got);
    return got.size() >= wire::kHelloSize + expected.size();
  }));
  ASSERT_EQ(got.size(), wire::kHelloSize + expected.size());
  EXPECT_EQ(wire::Get32(got.data()), wire::kHelloMagic);
  EXPECT_TRUE(got.substr(wire::kHelloSize) == expected)
      << "the frames differ from FrameBytes()";
  ASSERT_TRUE(
      PumpUntil({&server}, [&] { return server.Count(FERRY_EV_SEND_DONE) == 3; }));
  server.t().Close(conn);
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_CLOSED, conn); }));
  server.t().CloseListener(l);
}

// --- peers that go away --------------------------------------------------------

TEST(TcpPlugin, PeerClosingMidPayloadFailsThePlacement) {
  Endpoint server;
  ferry_listener_t* l = nullptr;
  std::string address = server.Listen("127.0.0.1:0", &l);
  RawSocket raw = RawSocket::ConnectTo(address);
  std::string payload(1u << 20, 'p');
  std::string frame = FrameBytes("cut", {{payload, /*is_inline=*/false}});
  raw.SendAll(HelloBytes() + frame.substr(0, frame.size() - payload.size() / 2));

  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  Event in = server.Take(FERRY_EV_ARRIVAL);
  ferry_conn_t* conn = in.conn;
  std::vector<char> landing(payload.size());
  std::vector<ferry_place_dest_t> dests = {Dest(landing.data(), landing.size())};
  ASSERT_TRUE(server.t().Place(conn, PlaceArgs(in.msg_id, dests, Cookie(5))).ok());
  // Read the plugin's hello first, so close() sends FIN rather than RST.
  std::string hello;
  ASSERT_TRUE(PumpUntil({&server}, [&] {
    raw.ReadAvailable(&hello);
    return hello.size() >= wire::kHelloSize;
  }));
  raw.Close();

  ASSERT_TRUE(PumpUntil({&server}, [&] {
    return server.Has(FERRY_EV_PLACE_DONE) && server.Has(FERRY_EV_CONN_BROKEN);
  }));
  Event placed = server.Take(FERRY_EV_PLACE_DONE, conn);
  EXPECT_EQ(placed.status, FERRY_PEER_GONE);
  EXPECT_EQ(placed.user_data, Cookie(5));
  EXPECT_NE(placed.message.find("middle of a message"), std::string::npos)
      << placed.message;
  EXPECT_EQ(server.Take(FERRY_EV_CONN_BROKEN, conn).status, FERRY_PEER_GONE);
  server.t().Close(conn);
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_CLOSED, conn); }));
  server.t().CloseListener(l);
}

TEST(TcpPlugin, PeerClosingMidFrameBreaksTheConnection) {
  Endpoint server;
  ferry_listener_t* l = nullptr;
  std::string address = server.Listen("127.0.0.1:0", &l);
  RawSocket raw = RawSocket::ConnectTo(address);
  raw.SendAll(HelloBytes() + FrameBytes("header", {}).substr(0, 20));
  std::string hello;
  ASSERT_TRUE(PumpUntil({&server}, [&] {
    raw.ReadAvailable(&hello);
    return hello.size() >= wire::kHelloSize;
  }));
  raw.Close();
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_CONN_BROKEN); }));
  Event broken = server.Take(FERRY_EV_CONN_BROKEN);
  EXPECT_EQ(broken.status, FERRY_PEER_GONE);
  EXPECT_NE(broken.message.find("incomplete frame"), std::string::npos) << broken.message;
  EXPECT_FALSE(server.Has(FERRY_EV_ARRIVAL));
  server.t().Close(broken.conn);
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_CLOSED); }));
  server.t().CloseListener(l);
}

TEST(TcpPlugin, PeerClosingFailsPendingSendsWithoutSigpipe) {
  Endpoint client;
  RawListener raw_listener;
  ferry_conn_t* conn = nullptr;
  ASSERT_TRUE(client.t().Connect(raw_listener.address(), nullptr, &conn).ok());
  RawSocket raw = raw_listener.Accept();
  raw.SendAll(HelloBytes());
  const size_t kSize = 64u << 20;
  std::vector<uint8_t> big(kSize, 7);
  std::vector<ferry_segment_t> segs = {Segment(big.data(), kSize)};
  ASSERT_TRUE(client.t().Send(conn, SendArgs("a", segs, Cookie(1))).ok());
  ASSERT_TRUE(client.t().Send(conn, SendArgs("b", segs, Cookie(2))).ok());
  ASSERT_TRUE(PumpUntil({&client}, [&] { return client.Has(FERRY_EV_CONNECTED); }));
  raw.Close();  // unread data: the kernel answers with RST
  ASSERT_TRUE(PumpUntil({&client}, [&] {
    return client.Count(FERRY_EV_SEND_DONE) == 2 && client.Has(FERRY_EV_CONN_BROKEN);
  }));
  for (int i = 0; i < 2; ++i) {
    Event done = client.Take(FERRY_EV_SEND_DONE);
    EXPECT_EQ(done.status, FERRY_PEER_GONE) << done.message;
  }
  Event broken = client.Take(FERRY_EV_CONN_BROKEN);
  EXPECT_EQ(broken.status, FERRY_PEER_GONE);
  EXPECT_NE(broken.message.find(raw_listener.address()), std::string::npos)
      << broken.message;
  ferry::Status st = client.t().Send(conn, SendArgs("c", {}, nullptr));
  EXPECT_EQ(st.code(), FERRY_PEER_GONE) << st.message();
  client.t().Close(conn);
  ASSERT_TRUE(PumpUntil({&client}, [&] { return client.Has(FERRY_EV_CLOSED); }));
}

TEST(TcpPlugin, ConnectToAClosedPortIsUnavailable) {
  std::string address;
  {
    RawListener gone;
    address = gone.address();
  }  // bound, then closed
  Endpoint client;
  ferry_conn_t* conn = nullptr;
  ASSERT_TRUE(client.t().Connect(address, Cookie(9), &conn).ok());
  ASSERT_TRUE(client.t().Send(conn, SendArgs("early", {}, Cookie(10))).ok());
  ASSERT_TRUE(PumpUntil({&client}, [&] {
    return client.Has(FERRY_EV_CONNECTED) && client.Has(FERRY_EV_SEND_DONE);
  }));
  Event connected = client.Take(FERRY_EV_CONNECTED, conn);
  EXPECT_EQ(connected.status, FERRY_UNAVAILABLE);
  EXPECT_EQ(connected.user_data, Cookie(9));
  EXPECT_NE(connected.message.find(address), std::string::npos) << connected.message;
  EXPECT_EQ(client.Take(FERRY_EV_SEND_DONE).status, FERRY_UNAVAILABLE);
  EXPECT_FALSE(client.Has(FERRY_EV_CONN_BROKEN));
  // Later sends are refused, and not with UNAVAILABLE ("retry"): retrying
  // cannot help a connection that never connected.
  ferry::Status st = client.t().Send(conn, SendArgs("late", {}, nullptr));
  EXPECT_EQ(st.code(), FERRY_FAILED_PRECONDITION) << st.message();
  EXPECT_NE(st.message().find(address), std::string::npos) << st.message();
  client.t().Close(conn);
  ASSERT_TRUE(PumpUntil({&client}, [&] { return client.Has(FERRY_EV_CLOSED); }));
}

TEST(TcpPlugin, CloseBeforeConnectedIsReturnedCancelsTheConnect) {
  Endpoint client, server;
  ferry_listener_t* l = nullptr;
  std::string address = server.Listen("127.0.0.1:0", &l);
  ferry_conn_t* conn = nullptr;
  ASSERT_TRUE(client.t().Connect(address, Cookie(1), &conn).ok());
  ASSERT_TRUE(client.t().Send(conn, SendArgs("x", {}, Cookie(2))).ok());
  // Let the connect complete (on loopback it does at once) without
  // returning any event: max_events 0.
  for (int i = 0; i < 100; ++i) {
    uint32_t n = 0;
    ASSERT_TRUE(client.t().Progress(nullptr, 0, &n).ok());
  }
  client.t().Close(conn);
  ASSERT_TRUE(PumpUntil({&client}, [&] { return client.Has(FERRY_EV_CLOSED); }));
  Event connected = client.Take(FERRY_EV_CONNECTED, conn);
  EXPECT_EQ(connected.status, FERRY_CANCELLED) << connected.message;
  EXPECT_EQ(connected.user_data, Cookie(1));
  EXPECT_EQ(client.events().back().type, FERRY_EV_CLOSED) << "CLOSED comes last";
  EXPECT_EQ(client.Count(FERRY_EV_SEND_DONE), 1u);
  server.t().CloseListener(l);
}

TEST(TcpPlugin, CloseCancelsSendsStuckBehindBackPressure) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  std::vector<uint8_t> big(32u << 20, 1);
  std::vector<ferry_segment_t> segs = {Segment(big.data(), big.size())};
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("", segs, Cookie(1))).ok());
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("", segs, Cookie(2))).ok());
  PumpFor({&client, &server}, std::chrono::milliseconds(50));  // nobody answers
  client.t().Close(link.client);
  ASSERT_TRUE(PumpUntil({&client}, [&] { return client.Has(FERRY_EV_CLOSED); }));
  ASSERT_EQ(client.Count(FERRY_EV_SEND_DONE), 2u);
  EXPECT_EQ(client.events().back().type, FERRY_EV_CLOSED) << "CLOSED comes last";
  for (const Event& e : client.events()) {
    if (e.type == FERRY_EV_SEND_DONE) {
      EXPECT_EQ(e.status, FERRY_CANCELLED) << e.message;
    }
  }
  server.t().Close(link.server);
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_CLOSED); }));
  server.t().CloseListener(link.listener);
}

// --- argument checks -----------------------------------------------------------

TEST(TcpPlugin, BadSendsAreRefusedAndPostNothing) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  const ferry_context_info_t& info = client.t().info();
  // A bogus pointer with a huge length: refused on the length alone.
  const void* bogus = reinterpret_cast<const void*>(0x10);
  std::vector<ferry_segment_t> huge = {Segment(bogus, info.max_message_size + 1)};
  ferry::Status st = client.t().Send(link.client, SendArgs("", huge, nullptr));
  EXPECT_EQ(st.code(), FERRY_RESOURCE_EXHAUSTED);
  EXPECT_NE(st.message().find("max_message_size"), std::string::npos) << st.message();

  std::vector<ferry_segment_t> overflow = {Segment(bogus, UINT64_MAX),
                                           Segment(bogus, UINT64_MAX)};
  EXPECT_EQ(client.t().Send(link.client, SendArgs("", overflow, nullptr)).code(),
            FERRY_RESOURCE_EXHAUSTED);

  std::string big_header(info.max_header_size + 1, 'h');
  st = client.t().Send(link.client, SendArgs(big_header, {}, nullptr));
  EXPECT_EQ(st.code(), FERRY_RESOURCE_EXHAUSTED);
  EXPECT_NE(st.message().find("max_header_size"), std::string::npos) << st.message();

  std::vector<ferry_segment_t> many(info.max_segments + 1, Segment(nullptr, 0));
  EXPECT_EQ(client.t().Send(link.client, SendArgs("", many, nullptr)).code(),
            FERRY_RESOURCE_EXHAUSTED);

  char byte = 0;
  std::vector<ferry_segment_t> gpu = {Segment(&byte, 1, FERRY_DEVICE_CUDA)};
  st = client.t().Send(link.client, SendArgs("", gpu, nullptr));
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("device"), std::string::npos) << st.message();

  std::vector<ferry_segment_t> null_data = {Segment(nullptr, 5)};
  EXPECT_EQ(client.t().Send(link.client, SendArgs("", null_data, nullptr)).code(),
            FERRY_INVALID_ARGUMENT);

  PumpFor({&client, &server}, std::chrono::milliseconds(50));
  EXPECT_EQ(client.Count(FERRY_EV_SEND_DONE), 0u) << "a refused send posted something";
  EXPECT_FALSE(server.Has(FERRY_EV_ARRIVAL));
  CloseLink(&client, &server, link);
}

TEST(TcpPlugin, BadPlacesAreRefusedAndTheArrivalStaysAnswerable) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  std::vector<uint8_t> big = Pattern(100000, 8);
  std::vector<ferry_segment_t> segs = {Segment(big.data(), big.size())};
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("", segs, nullptr)).ok());
  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  Event in = server.Take(FERRY_EV_ARRIVAL);

  std::vector<uint8_t> small(10), landing(big.size());
  std::vector<ferry_place_dest_t> too_small = {Dest(small.data(), small.size())};
  ferry::Status st =
      server.t().Place(link.server, PlaceArgs(in.msg_id, too_small, nullptr));
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(st.message().find("holds 10 bytes"), std::string::npos) << st.message();

  std::vector<ferry_place_dest_t> ok = {Dest(landing.data(), landing.size())};
  st = server.t().Place(link.server, PlaceArgs(in.msg_id + 1, ok, nullptr));
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << st.message();
  EXPECT_EQ(server.t().Discard(link.server, in.msg_id + 1).code(),
            FERRY_INVALID_ARGUMENT);
  std::vector<ferry_place_dest_t> two = {ok[0], ok[0]};
  EXPECT_EQ(server.t().Place(link.server, PlaceArgs(in.msg_id, two, nullptr)).code(),
            FERRY_INVALID_ARGUMENT);
  ferry_place_dest_t gpu = ok[0];
  gpu.device.type = FERRY_DEVICE_CUDA;
  EXPECT_EQ(server.t().Place(link.server, PlaceArgs(in.msg_id, {gpu}, nullptr)).code(),
            FERRY_INVALID_ARGUMENT);

  ASSERT_TRUE(server.t().Place(link.server, PlaceArgs(in.msg_id, ok, Cookie(4))).ok());
  EXPECT_EQ(server.t().Place(link.server, PlaceArgs(in.msg_id, ok, nullptr)).code(),
            FERRY_INVALID_ARGUMENT)
      << "answered twice";
  ASSERT_TRUE(
      PumpUntil({&client, &server}, [&] { return server.Has(FERRY_EV_PLACE_DONE); }));
  EXPECT_EQ(server.Count(FERRY_EV_PLACE_DONE), 1u);
  EXPECT_EQ(landing, big);
  CloseLink(&client, &server, link);
}

// --- wakeup fd -----------------------------------------------------------------

TEST(TcpPlugin, WakeupFdWakesASleepingHost) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  int client_fd = client.t().info().wakeup_fd;
  // Drain until both sides are idle: then the fd is quiet.
  auto drain = [&](Endpoint* e) {
    int idle = 0;
    while (idle < 3) idle = e->PollOnce() == 0 ? idle + 1 : 0;
  };
  drain(&client);
  drain(&server);
  drain(&client);
  pollfd p{client_fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "an idle context must not wake its host";

  // A send that completes inside send() still makes the fd readable.
  ASSERT_TRUE(client.t().Send(link.client, SendArgs("ping", {}, Cookie(1))).ok());
  EXPECT_EQ(poll(&p, 1, 0), 1);
  ASSERT_TRUE(PumpUntil({&client}, [&] { return client.Has(FERRY_EV_SEND_DONE); }));
  drain(&client);
  EXPECT_EQ(poll(&p, 1, 0), 0);

  // Sleep on the fd; the server's message wakes it.
  ASSERT_TRUE(PumpUntil({&server}, [&] { return server.Has(FERRY_EV_ARRIVAL); }));
  ASSERT_TRUE(server.t().Discard(link.server, server.Take(FERRY_EV_ARRIVAL).msg_id).ok());
  ASSERT_TRUE(server.t().Send(link.server, SendArgs("pong", {}, nullptr)).ok());
  EXPECT_EQ(poll(&p, 1, 10000), 1) << "the reply did not wake the client";
  ASSERT_TRUE(PumpUntil({&client}, [&] { return client.Has(FERRY_EV_ARRIVAL); }));
  EXPECT_EQ(client.Take(FERRY_EV_ARRIVAL).header, "pong");
  CloseLink(&client, &server, link);
}

// --- threads, many connections, cleanup ------------------------------------------

TEST(TcpPlugin, SendsFromManyThreadsWhileProgressing) {
  Endpoint client, server;
  Link link = Connect(&client, &server);
  constexpr int kThreads = 4, kPerThread = 500;
  std::atomic<int> started{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      ++started;
      for (int i = 0; i < kPerThread; ++i) {
        std::string header = std::to_string(t) + ":" + std::to_string(i);
        for (;;) {
          ferry::Status st = client.t().Send(link.client, SendArgs(header, {}, nullptr));
          if (st.ok()) break;
          ASSERT_EQ(st.code(), FERRY_UNAVAILABLE) << st.message();
        }
      }
    });
  }
  std::vector<int> next(kThreads, 0);
  int received = 0;
  bool done = PumpUntil({&client, &server}, [&] {
    while (server.Has(FERRY_EV_ARRIVAL)) {
      Event in = server.Take(FERRY_EV_ARRIVAL);
      int t = std::stoi(in.header.substr(0, in.header.find(':')));
      int i = std::stoi(in.header.substr(in.header.find(':') + 1));
      EXPECT_EQ(i, next[t]) << "per-thread order";
      next[t] = i + 1;
      ++received;
      EXPECT_TRUE(server.t().Discard(link.server, in.msg_id).ok());
    }
    client.events().clear();
    return received == kThreads * kPerThread;
  });
  for (auto& th : senders) th.join();
  EXPECT_TRUE(done) << received << " of " << kThreads * kPerThread;
  CloseLink(&client, &server, link);
}

TEST(TcpPlugin, ManyConnectionsAndContextsLeaveNoFdsBehind) {
  TcpPlugin();  // load once, outside the count
  size_t fds_before = OpenFdCount();
  for (int round = 0; round < 3; ++round) {
    Endpoint client, server;
    ferry_listener_t* l = nullptr;
    std::string address = server.Listen("127.0.0.1:0", &l);
    constexpr int kConns = 24;
    std::vector<ferry_conn_t*> conns(kConns);
    for (int i = 0; i < kConns; ++i) {
      ASSERT_TRUE(client.t().Connect(address, Cookie(i + 1), &conns[i]).ok());
      ASSERT_TRUE(
          client.t().Send(conns[i], SendArgs(std::to_string(i), {}, nullptr)).ok());
    }
    std::vector<ferry_conn_t*> accepted;
    int arrivals = 0;
    ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
      while (server.Has(FERRY_EV_ACCEPTED))
        accepted.push_back(server.Take(FERRY_EV_ACCEPTED).conn);
      while (server.Has(FERRY_EV_ARRIVAL)) {
        Event in = server.Take(FERRY_EV_ARRIVAL);
        EXPECT_TRUE(server.t().Discard(in.conn, in.msg_id).ok());
        ++arrivals;
      }
      return arrivals == kConns && client.Count(FERRY_EV_SEND_DONE) == kConns;
    }));
    server.t().CloseListener(l);
    for (ferry_conn_t* c : conns) client.t().Close(c);
    for (ferry_conn_t* c : accepted) server.t().Close(c);
    ASSERT_TRUE(PumpUntil({&client, &server}, [&] {
      return client.Count(FERRY_EV_CLOSED) == kConns &&
             server.Count(FERRY_EV_CLOSED) == kConns;
    }));
    // Connections left open at fini are released too.
    ferry_conn_t* dangling = nullptr;
    ASSERT_TRUE(client.t().Connect(address, nullptr, &dangling).ok());
  }
  EXPECT_EQ(OpenFdCount(), fds_before);
}

}  // namespace
}  // namespace ferry_tcp_test
