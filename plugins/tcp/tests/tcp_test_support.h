// Helpers for the tcp plugin tests: the tcp plugin bound to the testkit's
// endpoints (conformance/testkit: production loader, owned event copies,
// pumping until a condition holds, linking two contexts), and talking to a
// context from a raw socket in the ferry-tcp wire format.
#pragma once

#include "testkit/endpoint.h"
#include "testkit/event.h"

#include <ferry/transport.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry_tcp_test {

using ferry::testkit::CloseLink;
using ferry::testkit::Dest;
using ferry::testkit::Event;
using ferry::testkit::Link;
using ferry::testkit::PlaceArgs;
using ferry::testkit::PumpFor;
using ferry::testkit::PumpUntil;
using ferry::testkit::Segment;
using ferry::testkit::SendArgs;
using Clock = std::chrono::steady_clock;

// libferry-tcp.so from the build tree, loaded once per process.
std::shared_ptr<const ferry::Plugin> TcpPlugin();

// A context of the tcp plugin; throws when it cannot be opened.
class Endpoint : public ferry::testkit::Endpoint {
 public:
  explicit Endpoint(uint32_t flags = 0);
};

// Listens on `server` (loopback by default), connects from `client` and
// waits for both ends (ferry::testkit::Connect).
Link Connect(Endpoint* client, Endpoint* server,
             const std::string& listen_address = "127.0.0.1:0");

// Deterministic bytes for payload checks (ferry::testkit::FillPattern).
std::vector<uint8_t> Pattern(size_t size, uint32_t seed);

// A blocking raw TCP socket for speaking (or mis-speaking) the wire format.
class RawSocket {
 public:
  RawSocket() = default;
  explicit RawSocket(int fd) : fd_(fd) {}
  ~RawSocket();
  RawSocket(RawSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RawSocket& operator=(RawSocket&&) = delete;

  static RawSocket ConnectTo(const std::string& address);  // "ip:port"
  int fd() const { return fd_; }
  void SendAll(const std::string& bytes);
  // Non-blocking: appends what is there; false on EOF/error.
  bool ReadAvailable(std::string* out);
  void Close();

 private:
  int fd_ = -1;
};

// A raw listening socket on 127.0.0.1 (for a plugin client to connect to).
class RawListener {
 public:
  RawListener();
  ~RawListener();
  std::string address() const { return address_; }
  RawSocket Accept();  // blocking: the kernel completes the handshake

 private:
  int fd_ = -1;
  std::string address_;
};

// Wire-format builders (see src/wire.h).
std::string HelloBytes(uint16_t version = 1);
struct RawSegment {
  std::string bytes;
  bool is_inline = true;
};
// A whole message frame: prefix, table, header, inline then other payloads.
std::string FrameBytes(const std::string& header,
                       const std::vector<RawSegment>& segments);

// True when this machine can bind [::1].
bool HaveIpv6Loopback();

}  // namespace ferry_tcp_test
