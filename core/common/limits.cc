// The limits' resolution and their words (limits.h).
#include "common/limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace ferry {
namespace {

// Descriptors kept for the process's own use (the application's files,
// pipes, the plugins' eventfds and epoll) when the open-file limit, not
// kDefaultMaxConnections, bounds the connections.
constexpr uint64_t kFdsKeptBack = 64;

// A whole number in [1, max] from environment variable `name` into *out;
// left alone when the variable is unset or empty.
Status FromEnvironment(const std::string& field, uint64_t max, uint64_t* out) {
  const std::string name = Limits::EnvName(field);
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return Status::Ok();
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n == 0 || n > max || *v == '-') {
    return Status(FERRY_INVALID_ARGUMENT, name + "='" + v +
                                              "' is not a whole number in 1.." +
                                              std::to_string(max) + " (docs/limits.md)");
  }
  *out = n;
  return Status::Ok();
}

// Fills a 32- or 64-bit field left 0.
template <typename T>
Status Fill(const std::string& field, T default_value, T* value) {
  if (*value != 0) return Status::Ok();
  uint64_t v = 0;
  if (Status s = FromEnvironment(field, static_cast<T>(-1), &v); !s.ok()) return s;
  *value = v != 0 ? static_cast<T>(v) : default_value;
  return Status::Ok();
}

uint32_t DefaultMaxConnections() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) {
    return Limits::kDefaultMaxConnections;
  }
  const uint64_t room =
      r.rlim_cur > 2 * kFdsKeptBack ? r.rlim_cur - kFdsKeptBack : r.rlim_cur / 2;
  return static_cast<uint32_t>(
      std::max<uint64_t>(1, std::min<uint64_t>(room, Limits::kDefaultMaxConnections)));
}

}  // namespace

Limits Limits::Unset() {
  Limits l;
  l.max_message_size = 0;
  l.max_calls_in_flight_per_peer = 0;
  l.max_queued_bytes_per_connection = 0;
  l.max_queued_calls = 0;
  l.max_connections = 0;
  l.handshake_timeout = std::chrono::milliseconds(0);
  return l;
}

Status Limits::Resolve() {
  Status s = Fill("max_message_size", kDefaultMaxMessageSize, &max_message_size);
  if (s.ok()) {
    s = Fill("max_calls_in_flight_per_peer", kDefaultMaxCallsInFlightPerPeer,
             &max_calls_in_flight_per_peer);
  }
  if (s.ok()) {
    s = Fill("max_queued_bytes_per_connection", kDefaultMaxQueuedBytesPerConnection,
             &max_queued_bytes_per_connection);
  }
  if (s.ok()) s = Fill("max_queued_calls", kDefaultMaxQueuedCalls, &max_queued_calls);
  if (s.ok()) s = Fill("max_connections", DefaultMaxConnections(), &max_connections);
  if (s.ok() && handshake_timeout.count() == 0) {
    uint64_t ms = 0;
    s = FromEnvironment("handshake_timeout_ms", UINT32_MAX, &ms);
    handshake_timeout = std::chrono::milliseconds(ms);  // 0: the peer timeout
  }
  return s;
}

std::string Limits::EnvName(const std::string& name) {
  std::string env = "FERRY_";
  for (char c : name)
    env += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return env;
}

std::string Limits::Describe(const std::string& name, uint64_t value) {
  return "the limit " + name + " (" + std::to_string(value) +
         "; raise it with ferry_limits_t." + name + ", " + EnvName(name) +
         ", or Python's init_rpc(limits={'" + name + "': ...}); docs/limits.md)";
}

}  // namespace ferry
