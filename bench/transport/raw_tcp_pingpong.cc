#include "transport/raw_tcp_pingpong.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ferry::bench {
namespace {

Status Errno(const std::string& what) {
  const int e = errno;
  return Status(e == ECONNRESET || e == EPIPE ? FERRY_PEER_GONE : FERRY_UNKNOWN,
                "raw tcp: " + what + ": " + std::strerror(e));
}

Status Configure(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return Errno("setsockopt(TCP_NODELAY)");
  }
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return Errno("fcntl(O_NONBLOCK)");
  }
  return Status();
}

bool SplitHostPort(const std::string& address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  *host = address.substr(0, colon);
  *port = static_cast<uint16_t>(std::atoi(address.c_str() + colon + 1));
  return *port != 0;
}

}  // namespace

StatusOr<std::unique_ptr<RawTcpListener>> RawTcpListener::Open() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status st = Errno("bind/listen on 127.0.0.1");
    close(fd);
    return st;
  }
  return std::unique_ptr<RawTcpListener>(
      new RawTcpListener(fd, "127.0.0.1:" + std::to_string(ntohs(addr.sin_port))));
}

RawTcpListener::~RawTcpListener() {
  close(fd_);
}

StatusOr<int> RawTcpListener::Accept(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  int n;
  do {
    n = poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Errno("poll(listener)");
  if (n == 0) {
    return Status(FERRY_DEADLINE_EXCEEDED, "raw tcp: the peer did not connect within " +
                                               std::to_string(timeout_ms) + " ms");
  }
  int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return Errno("accept");
  Status st = Configure(fd);
  if (!st.ok()) {
    close(fd);
    return st;
  }
  return fd;
}

StatusOr<int> RawTcpConnect(const std::string& address) {
  std::string host;
  uint16_t port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (!SplitHostPort(address, &host, &port) ||
      inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status(FERRY_INVALID_ARGUMENT, "raw tcp: bad address '" + address + "'");
  }
  addr.sin_port = htons(port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  // Blocking connect (set-up is not timed), then configure for the test.
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Status st = Errno("connect to " + address);
    close(fd);
    return st;
  }
  Status st = Configure(fd);
  if (!st.ok()) {
    close(fd);
    return st;
  }
  return fd;
}

RawTcpPingPong::RawTcpPingPong(int fd, PollMode mode, BufferSet* buffers)
    : ByteStreamPingPong(buffers), fd_(fd), mode_(mode) {}

RawTcpPingPong::~RawTcpPingPong() {
  close(fd_);
}

Status RawTcpPingPong::WaitFor(short events) {
  if (mode_ == PollMode::kBusy) return Status();  // spin: just retry the call
  ++counters_.waits;
  pollfd p{fd_, events, 0};
  // A finite timeout only so that a signal-free hang is impossible; the
  // watchdog (--timeout) bounds the run as a whole.
  if (poll(&p, 1, 1000) < 0 && errno != EINTR) return Errno("poll");
  return Status();
}

Status RawTcpPingPong::Send(const uint8_t* data, uint64_t size) {
  while (size > 0) {
    const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
    ++counters_.calls;
    if (n > 0) {
      data += n;
      size -= static_cast<uint64_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Status st = WaitFor(POLLOUT);
      if (!st.ok()) return st;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return Errno("send");
    }
  }
  return Status();
}

Status RawTcpPingPong::Receive(uint8_t* data, uint64_t size) {
  while (size > 0) {
    const ssize_t n = recv(fd_, data, size, 0);
    ++counters_.calls;
    if (n > 0) {
      data += n;
      size -= static_cast<uint64_t>(n);
    } else if (n == 0) {
      return Status(FERRY_PEER_GONE, "raw tcp: the peer closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Status st = WaitFor(POLLIN);
      if (!st.ok()) return st;
    } else if (errno != EINTR) {
      return Errno("recv");
    }
  }
  return Status();
}

// --------------------------------------------------------------------------
// As a reference of the benchmark.
// --------------------------------------------------------------------------
namespace {

const ReferenceInfo kRawTcpInfo = {
    "raw", "raw TCP",
    "plain TCP on 127.0.0.1, non-blocking, TCP_NODELAY, default socket "
    "buffers, no framing, same buffers and same polling mode"};

class RawTcpReferenceListener final : public ReferenceListener {
 public:
  RawTcpReferenceListener(std::unique_ptr<RawTcpListener> listener, PollMode mode,
                          BufferSet* buffers)
      : listener_(std::move(listener)), mode_(mode), buffers_(buffers) {}
  std::string address() const override { return listener_->address(); }
  StatusOr<std::unique_ptr<PingPongServer>> Accept(int timeout_ms) override {
    auto fd = listener_->Accept(timeout_ms);
    if (!fd.ok()) return fd.status();
    return std::unique_ptr<PingPongServer>(
        new RawTcpPingPong(fd.value(), mode_, buffers_));
  }

 private:
  std::unique_ptr<RawTcpListener> listener_;
  PollMode mode_;
  BufferSet* buffers_;
};

class RawTcpReference final : public Reference {
 public:
  const ReferenceInfo& info() const override { return kRawTcpInfo; }
  StatusOr<std::unique_ptr<ReferenceListener>> Listen(PollMode mode,
                                                      BufferSet* buffers) override {
    auto listener = RawTcpListener::Open();
    if (!listener.ok()) return listener.status();
    return std::unique_ptr<ReferenceListener>(
        new RawTcpReferenceListener(std::move(listener).value(), mode, buffers));
  }
  // A blocking connect() returns once the kernel queued the connection in
  // the listener's backlog: it never waits for the peer's accept().
  StatusOr<std::unique_ptr<PingPongClient>> Connect(const std::string& address,
                                                    PollMode mode,
                                                    BufferSet* buffers) override {
    auto fd = RawTcpConnect(address);
    if (!fd.ok()) return fd.status();
    return std::unique_ptr<PingPongClient>(new RawTcpPingPong(fd.value(), mode, buffers));
  }
};

}  // namespace

std::unique_ptr<Reference> MakeRawTcpReference() {
  return std::make_unique<RawTcpReference>();
}

}  // namespace ferry::bench
