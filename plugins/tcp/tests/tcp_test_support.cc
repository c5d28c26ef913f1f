#include "tcp_test_support.h"

#include "wire.h"

#include "testkit/pattern.h"
#include "testkit/plugin.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ferry_tcp_test {

namespace wire = ferry_tcp::wire;

std::shared_ptr<const ferry::Plugin> TcpPlugin() {
  auto loaded = ferry::testkit::LoadPlugin(FERRY_TCP_PLUGIN_DIR, "tcp");
  if (!loaded.ok()) {
    ADD_FAILURE() << "cannot load the tcp plugin from " << FERRY_TCP_PLUGIN_DIR << ": "
                  << loaded.status().ToString();
    return nullptr;
  }
  return loaded.value();
}

namespace {

ferry::testkit::Endpoint::Options TcpOptions(uint32_t flags) {
  ferry::testkit::Endpoint::Options o;
  o.flags = flags;
  return o;
}

}  // namespace

Endpoint::Endpoint(uint32_t flags)
    : ferry::testkit::Endpoint(TcpPlugin(), TcpOptions(flags)) {
  if (!ok()) throw std::runtime_error("tcp init failed: " + status().ToString());
}

Link Connect(Endpoint* client, Endpoint* server, const std::string& listen_address) {
  Link link;
  ferry::testkit::Connect(client, server, listen_address, &link);
  return link;
}

std::vector<uint8_t> Pattern(size_t size, uint32_t seed) {
  std::vector<uint8_t> v(size);
  ferry::testkit::FillPattern(v.data(), v.size(), seed);
  return v;
}

// --- raw sockets -------------------------------------------------------------

RawSocket::~RawSocket() {
  Close();
}

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
    ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
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

RawListener::~RawListener() {
  ::close(fd_);
}

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
  std::string out(wire::kPrefixSize + segments.size() * wire::kSegmentEntrySize, '\0');
  wire::EncodePrefix(p, out.data());
  for (size_t i = 0; i < segments.size(); ++i) {
    wire::SegmentEntry e;
    e.length = segments[i].bytes.size();
    e.device_type = FERRY_DEVICE_CPU;
    e.flags = segments[i].is_inline ? wire::kSegmentInline : 0;
    wire::EncodeSegment(e, out.data() + wire::kPrefixSize + i * wire::kSegmentEntrySize);
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
