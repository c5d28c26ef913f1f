// Helpers for the tcp plugin tests: load the plugin through the production
// loader, drive contexts with progress() until a condition holds (never a
// sleep), keep owned copies of events, and talk to a context from a raw
// socket in the ferry-tcp wire format.
#pragma once

#include "loader/plugin_loader.h"
#include "transport/transport.h"

#include <ferry/transport.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace ferry_tcp_test {

// libferry-tcp.so from the build tree, loaded once per process.
std::shared_ptr<const ferry::Plugin> TcpPlugin();

// An owned copy of an event; for ARRIVAL the header and inline bytes are
// copied too (the plugin's copies are valid until the arrival is answered).
struct Event {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  ferry_conn_t* conn = nullptr;
  void* user_data = nullptr;
  void* conn_user_data = nullptr;
  std::string message;
  uint64_t msg_id = 0;
  std::string header;
  struct Segment {
    uint64_t length = 0;
    ferry_device_t device{};
    bool is_inline = false;
    std::string bytes;  // inline bytes
  };
  std::vector<Segment> segments;
};

std::string Describe(const Event& e);

// One context plus the events it returned that the test has not taken yet.
class Endpoint {
 public:
  explicit Endpoint(uint32_t flags = 0);
  ferry::Transport& t() { return *transport_; }
  const ferry::Transport& t() const { return *transport_; }

  // One progress() call; returns how many events it produced.
  size_t PollOnce();
  // True when an event matching (type, conn) is waiting (conn NULL = any).
  bool Has(int32_t type, ferry_conn_t* conn = nullptr) const;
  size_t Count(int32_t type, ferry_conn_t* conn = nullptr) const;
  // Removes and returns the first event matching (type, conn); fails the
  // test (and returns an empty event) when there is none.
  Event Take(int32_t type, ferry_conn_t* conn = nullptr);
  std::vector<Event>& events() { return events_; }

  // Listens and returns the listener's address.
  std::string Listen(const std::string& address, ferry_listener_t** out);

 private:
  std::unique_ptr<ferry::Transport> transport_;
  std::vector<Event> events_;
};

using Clock = std::chrono::steady_clock;

// Progresses every endpoint until done() is true; false at the deadline.
bool PumpUntil(std::initializer_list<Endpoint*> endpoints,
               const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));
// Progresses every endpoint for `duration` (to show that something does
// *not* happen).
void PumpFor(std::initializer_list<Endpoint*> endpoints,
             std::chrono::milliseconds duration);

// A connected pair: client conn and the server's accepted conn.
struct Link {
  ferry_conn_t* client = nullptr;
  ferry_conn_t* server = nullptr;
  ferry_listener_t* listener = nullptr;
  std::string address;
};
Link Connect(Endpoint* client, Endpoint* server,
             const std::string& listen_address = "127.0.0.1:0");
// close() both ends and waits for their FERRY_EV_CLOSED.
void CloseLink(Endpoint* client, Endpoint* server, const Link& link);

// Builders for the ABI structs. They point into their arguments: use them
// within the full expression of the call (SendArgs("hdr", ...) makes a
// temporary string).
ferry_segment_t Segment(const void* data, uint64_t length,
                        int32_t device_type = FERRY_DEVICE_CPU);
ferry_send_args_t SendArgs(const std::string& header,
                           const std::vector<ferry_segment_t>& segments,
                           void* user_data);
ferry_place_dest_t Dest(void* data, uint64_t capacity);
ferry_place_args_t PlaceArgs(uint64_t msg_id,
                             const std::vector<ferry_place_dest_t>& dests,
                             void* user_data);

// Deterministic bytes for payload checks.
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
