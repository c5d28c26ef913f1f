#include "tcp_test_support.h"

#include "wire.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace ferry_tcp_test {

namespace wire = ferry_tcp::wire;

std::shared_ptr<const ferry::Plugin> TcpPlugin() {
  static std::shared_ptr<const ferry::Plugin> plugin = [] {
    ferry::LoaderOptions options;
    options.search_path = {FERRY_TCP_PLUGIN_DIR};
    ferry::PluginLoader loader(options);
    auto loaded = loader.Load("tcp");
    if (!loaded.ok()) {
      ADD_FAILURE() << "cannot load the tcp plugin from " << FERRY_TCP_PLUGIN_DIR
                    << ": " << loaded.status().ToString();
      return std::shared_ptr<const ferry::Plugin>();
    }
    return loaded.value();
  }();
  return plugin;
}

std::string Describe(const Event& e) {
  std::string s = "event type " + std::to_string(e.type) + " status " +
                  std::to_string(e.status);
  if (!e.message.empty()) s += " (" + e.message + ")";
  return s;
}

Endpoint::Endpoint(uint32_t flags) {
  auto plugin = TcpPlugin();
  if (!plugin) throw std::runtime_error("tcp plugin not loaded");
  auto opened = ferry::Transport::Open(plugin, flags, "test");
  if (!opened.ok()) {
    throw std::runtime_error("tcp init failed: " + opened.status().ToString());
  }
  transport_ = std::move(opened).value();
}

size_t Endpoint::PollOnce() {
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
    e.conn_user_data = r.conn_user_data;
    e.message = r.message != nullptr ? r.message : "";
    if (r.status != FERRY_OK) {
      EXPECT_FALSE(e.message.empty()) << "failed event without a message";
    }
    if (r.type == FERRY_EV_ARRIVAL) {
      e.msg_id = r.msg_id;
      e.header.assign(static_cast<const char*>(r.header), r.header_len);
      for (uint32_t s = 0; s < r.num_segments; ++s) {
        const ferry_arrival_segment_t* seg = FERRY_ELEMENT_AT(
            const ferry_arrival_segment_t, r.segments, r.segment_stride, s);
        Event::Segment copy;
        copy.length = seg->length;
        copy.device = seg->device;
        copy.is_inline = seg->inline_data != nullptr;
        if (copy.is_inline) {
          copy.bytes.assign(static_cast<const char*>(seg->inline_data),
                            seg->length);
        }
        e.segments.push_back(std::move(copy));
      }
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

Event Endpoint::Take(int32_t type, ferry_conn_t* conn) {
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (it->type == type && (conn == nullptr || it->conn == conn)) {
      Event e = std::move(*it);
      events_.erase(it);
      return e;
    }
  }
  ADD_FAILURE() << "no event of type " << type << " waiting";
  return Event{};
}

std::string Endpoint::Listen(const std::string& address,
                             ferry_listener_t** out) {
  ferry::Status st = transport_->Listen(address, nullptr, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return "";
  auto addr = transport_->ListenerAddress(*out);
  EXPECT_TRUE(addr.ok()) << addr.status().ToString();
  return addr.ok() ? addr.value() : "";
}

bool PumpUntil(std::initializer_list<Endpoint*> endpoints,
               const std::function<bool()>& done,
               std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    for (Endpoint* e : endpoints) e->PollOnce();
  }
  return true;
}

void PumpFor(std::initializer_list<Endpoint*> endpoints,
             std::chrono::milliseconds duration) {
  auto until = Clock::now() + duration;
  while (Clock::now() < until) {
    for (Endpoint* e : endpoints) e->PollOnce();
  }
}

Link Connect(Endpoint* client, Endpoint* server,
             const std::string& listen_address) {
  Link link;
  link.address = server->Listen(listen_address, &link.listener);
  ferry::Status st = client->t().Connect(link.address, nullptr, &link.client);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(PumpUntil({client, server}, [&] {
    return client->Has(FERRY_EV_CONNECTED, link.client) &&
           server->Has(FERRY_EV_ACCEPTED);
  })) << "connect to " << link.address << " did not complete";
  Event connected = client->Take(FERRY_EV_CONNECTED, link.client);
  EXPECT_EQ(connected.status, FERRY_OK) << connected.message;
  link.server = server->Take(FERRY_EV_ACCEPTED).conn;
  return link;
}

void CloseLink(Endpoint* client, Endpoint* server, const Link& link) {
  client->t().Close(link.client);
  server->t().Close(link.server);
  EXPECT_TRUE(PumpUntil({client, server}, [&] {
    return client->Has(FERRY_EV_CLOSED, link.client) &&
           server->Has(FERRY_EV_CLOSED, link.server);
  }));
  server->t().CloseListener(link.listener);
}

ferry_segment_t Segment(const void* data, uint64_t length,
                        int32_t device_type) {
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

std::vector<uint8_t> Pattern(size_t size, uint32_t seed) {
  std::vector<uint8_t> v(size);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// --- raw sockets -------------------------------------------------------------

RawSocket::~RawSocket() { Close(); }

void RawSocket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

RawSocket RawSocket::ConnectTo(const std::string& address) {
  size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0)
      << std::strerror(errno);
  return RawSocket(fd);
}

void RawSocket::SendAll(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done,
                       MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += static_cast<size_t>(n);
  }
}

bool RawSocket::ReadAvailable(std::string* out) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      out->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;  // EOF or error
  }
}

RawListener::RawListener() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(fd_, 16), 0);
  socklen_t len = sizeof a;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

RawListener::~RawListener() { ::close(fd_); }

RawSocket RawListener::Accept() {
  int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  return RawSocket(fd);
}

// --- wire builders -------------------------------------------------------------

std::string HelloBytes(uint16_t version) {
  wire::Hello h;
  h.max_header = 64 * 1024;
  h.max_segments = 64;
  h.inline_limit = 16 * 1024;
  h.inline_total = 256 * 1024;
  h.max_message = uint64_t{1} << 40;
  char buf[wire::kHelloSize];
  wire::EncodeHello(h, buf);
  wire::Put16(buf + 4, version);
  return std::string(buf, sizeof buf);
}

std::string FrameBytes(const std::string& header,
                       const std::vector<RawSegment>& segments) {
  wire::Prefix p;
  p.header_len = static_cast<uint32_t>(header.size());
  p.num_segments = static_cast<uint32_t>(segments.size());
  for (const RawSegment& s : segments) p.payload_bytes += s.bytes.size();
  std::string out(wire::kPrefixSize + segments.size() * wire::kSegmentEntrySize,
                  '\0');
  wire::EncodePrefix(p, out.data());
  for (size_t i = 0; i < segments.size(); ++i) {
    wire::SegmentEntry e;
    e.length = segments[i].bytes.size();
    e.device_type = FERRY_DEVICE_CPU;
    e.flags = segments[i].is_inline ? wire::kSegmentInline : 0;
    wire::EncodeSegment(e, out.data() + wire::kPrefixSize +
                               i * wire::kSegmentEntrySize);
  }
  out += header;
  for (const RawSegment& s : segments) {
    if (s.is_inline) out += s.bytes;
  }
  for (const RawSegment& s : segments) {
    if (!s.is_inline) out += s.bytes;
  }
  return out;
}

bool HaveIpv6Loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace ferry_tcp_test
