// ferry::Limits: the resources one worker lets its peers and its own
// callers use, so that neither a flood nor a lie about a length can exhaust
// it (docs/limits.md: each limit, its default and why, what happens at it).
//
// The one place the limits live: the C API fills it from ferry_limits_t,
// then FERRY_* environment variables, then the defaults below (Resolve);
// the agent reads the call limits, the engine the others. Every error at a
// limit carries Describe()'s words, so a user reads which limit, its value
// and how to raise it.
#pragma once

#include "common/status.h"

#include <chrono>
#include <cstdint>
#include <string>

namespace ferry {

struct Limits {
  // The defaults: far above what a program meets by accident, low enough
  // that one peer cannot take a worker's memory or file descriptors.
  static constexpr uint64_t kDefaultMaxMessageSize = uint64_t{4} << 30;
  static constexpr uint32_t kDefaultMaxCallsInFlightPerPeer = 4096;
  static constexpr uint64_t kDefaultMaxQueuedBytesPerConnection = uint64_t{1} << 30;
  static constexpr uint32_t kDefaultMaxQueuedCalls = 65536;
  static constexpr uint32_t kDefaultMaxConnections = 4096;

  // Header plus payload of one message, sent or received.
  uint64_t max_message_size = kDefaultMaxMessageSize;
  // Calls sent to one peer and not answered yet: a new one waits for room.
  uint32_t max_calls_in_flight_per_peer = kDefaultMaxCallsInFlightPerPeer;
  // Bytes to one peer not yet written to its connection: a new call waits.
  uint64_t max_queued_bytes_per_connection = kDefaultMaxQueuedBytesPerConnection;
  // Calls received and waiting for a handler thread: one more is refused.
  uint32_t max_queued_calls = kDefaultMaxQueuedCalls;
  // Open connections (either direction): an accepted one beyond is closed.
  uint32_t max_connections = kDefaultMaxConnections;
  // A connection still in its handshake after this is closed; 0: the
  // worker's peer timeout.
  std::chrono::milliseconds handshake_timeout{0};

  // Every limit 0 ("not set"): what Resolve fills.
  static Limits Unset();
  // Fills each field still 0 from its environment variable (FERRY_MAX_*,
  // FERRY_HANDSHAKE_TIMEOUT_MS), else its default (max_connections: also
  // no more than the open-file limit allows). INVALID_ARGUMENT names a
  // variable that is not a whole number in range.
  Status Resolve();

  // "the limit max_queued_calls (65536; raise it with
  // ferry_limits_t.max_queued_calls, FERRY_MAX_QUEUED_CALLS, or Python's
  // init_rpc(limits={'max_queued_calls': ...}))": what an error at a limit
  // says of it. `name` is a field name above.
  static std::string Describe(const std::string& name, uint64_t value);
  // The environment variable of field `name` ("FERRY_MAX_QUEUED_CALLS").
  static std::string EnvName(const std::string& name);
};

}  // namespace ferry
