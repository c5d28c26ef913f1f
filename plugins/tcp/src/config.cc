#include "config.h"

#include "status.h"
#include "wire.h"

#include "ferry_plugin/params.h"

#include <ferry/transport.h>

namespace ferry_tcp {

using ferry_plugin::IntParam;
using ferry_plugin::StringParam;

Config LoadConfig(uint32_t init_flags) {
  Config c;
  c.busy_poll =
      (init_flags & FERRY_INIT_BUSY_POLL) != 0 || IntParam("busy_poll", 0, 0, 1) != 0;
  c.listen_host = StringParam("listen_host", c.listen_host);
  c.advertise_host = StringParam("advertise_host", c.advertise_host);
  c.max_header_size = static_cast<uint32_t>(
      IntParam("max_header_size", c.max_header_size, 64, 16u << 20));
  c.max_segments = static_cast<uint32_t>(
      IntParam("max_segments", c.max_segments, 1, wire::kMaxSegmentsLimit));
  // The wire floor: a sender that has not seen our hello yet inlines up to
  // kMinInline, so a receiver must always accept that much.
  c.max_inline_size = static_cast<uint32_t>(
      IntParam("max_inline_size", c.max_inline_size, wire::kMinInline, 1u << 20));
  c.max_inline_total = static_cast<uint32_t>(
      IntParam("max_inline_total", c.max_inline_total, c.max_inline_size, 16u << 20));
  c.max_message_size =
      IntParam("max_message_size", c.max_message_size, 1u << 20, uint64_t{1} << 62);
  c.rx_buffer_size = static_cast<uint32_t>(
      IntParam("rx_buffer_size", c.rx_buffer_size, 4096, 64u << 20));
  c.socket_buffer_size = static_cast<uint32_t>(
      IntParam("socket_buffer_size", c.socket_buffer_size, 0, 1u << 30));
  c.loopback_socket_buffer_size = static_cast<uint32_t>(IntParam(
      "loopback_socket_buffer_size", c.loopback_socket_buffer_size, 0, 1u << 30));
  c.busy_poll_usec =
      static_cast<uint32_t>(IntParam("busy_poll_usec", c.busy_poll_usec, 0, 1000000));
  c.max_pending_sends = static_cast<uint32_t>(
      IntParam("max_pending_sends", c.max_pending_sends, 1, 1u << 30));
  return c;
}

std::string Config::Describe() const {
  std::string buffers;
  if (socket_buffer_size != 0) {
    buffers = Format("socket buffers %u B", socket_buffer_size);
  } else if (loopback_socket_buffer_size != 0) {
    buffers = Format(
        "socket buffers %u B to peers on this host, autotuned "
        "otherwise",
        loopback_socket_buffer_size);
  } else {
    buffers = "socket buffers autotuned";
  }
  return Format(
      "tcp over epoll, %s mode, TCP_NODELAY, %s; header <= %u B, segments "
      "<= %u, inline <= %u B per segment (%u B per message), message <= "
      "%llu B",
      busy_poll ? "busy-poll" : "sleeping", buffers.c_str(), max_header_size,
      max_segments, max_inline_size, max_inline_total,
      static_cast<unsigned long long>(max_message_size));
}

}  // namespace ferry_tcp
