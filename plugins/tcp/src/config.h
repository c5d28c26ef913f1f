// The settings of one tcp context, read once at init from the host's plugin
// parameters (in-process settings, then FERRY_TCP_<KEY> in the environment).
// README.md lists every key; values out of range are clamped with a warning.
#pragma once

#include <cstdint>
#include <string>

namespace ferry_tcp {

struct Config {
  // Busy-poll mode: progress() never sleeps and polls hot sockets directly.
  // FERRY_INIT_BUSY_POLL or busy_poll=1.
  bool busy_poll = false;
  // Host for listen(""): loopback, so nothing is exposed by default.
  std::string listen_host = "127.0.0.1";
  // Host put in listener_address() when bound to a wildcard address; empty
  // picks the first non-loopback interface address of the same family.
  std::string advertise_host;

  uint32_t max_header_size = 64 * 1024;           // per message
  uint32_t max_segments = 64;                     // per message
  uint32_t max_inline_size = 16 * 1024;           // per segment, receive side
  uint32_t max_inline_total = 256 * 1024;         // per message, receive side
  uint64_t max_message_size = uint64_t{1} << 40;  // header + segments: 1 TiB
  uint32_t rx_buffer_size = 64 * 1024;            // initial receive buffer per conn
  // SO_SNDBUF/SO_RCVBUF for every connection; 0 = see the next one.
  uint32_t socket_buffer_size = 0;
  // SO_SNDBUF/SO_RCVBUF for a connection whose peer is on this host
  // (loopback, or the peer's address is the local one), when
  // socket_buffer_size is 0; 0 = kernel autotuning. Loopback has no
  // bandwidth-delay product to cover: a small buffer keeps the data in
  // flight in cache (README.md, "Socket buffers").
  uint32_t loopback_socket_buffer_size = 256 * 1024;
  uint32_t busy_poll_usec = 50;        // SO_BUSY_POLL in busy-poll mode
  uint32_t max_pending_sends = 65536;  // per conn before UNAVAILABLE

  // One line for `ferry info`.
  std::string Describe() const;
};

// Reads every parameter through the host services (which may be NULL).
Config LoadConfig(uint32_t init_flags);

}  // namespace ferry_tcp
