// Asking a worker of a running job for its debug dump from another process
// (`ferry debug dump`; docs/debugging.md, "From another process"), without
// joining the job.
//
// How it reaches the worker: the job's store address is the one thing every
// worker of the job knows, and the worker hosting the store holds an
// authenticated connection to every member. So this process connects to
// the store as a store client does (the same handshake: the job's name and
// an HMAC proof of the job's secret both ways; a wrong or missing secret is
// refused before anything is read), never joins, and sends one DEBUG_DUMP
// naming the worker. The store's host answers with its own dump, or asks
// the named member over the job's own connections (the reserved function
// "ferry.debug_dump") and relays its answer.
#pragma once

#include "common/status.h"

#include <chrono>
#include <string>

namespace ferry {

struct RemoteDumpOptions {
  std::string store_address;  // host:port
  std::string job;
  std::string worker;  // its name; "" = the worker hosting the store
  std::string secret;  // the job's; empty is refused
  std::chrono::milliseconds timeout{10000};
};

// The JSON text of `worker`'s debug dump (Agent::DebugDump).
StatusOr<std::string> RemoteDebugDump(const RemoteDumpOptions& options);

}  // namespace ferry
