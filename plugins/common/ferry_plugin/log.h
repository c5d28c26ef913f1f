// Logging through the host: a plugin logs only through the
// ferry_host_services_t it received at negotiation, under the name it
// negotiated with (host.h). Nothing is formatted when the host's level
// filters the line out or there is no host yet.
#pragma once

#include <ferry/transport.h>  // FERRY_LOG_*

#include <cstdint>

namespace ferry_plugin {

// Out of line, so that a log line on an error branch of a hot function is
// one call there: the inliner then sees the hot function's real size.
void Log(int32_t level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ferry_plugin

// FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "close() called twice for %s", peer)
#define FERRY_PLUGIN_LOG(level, ...) ::ferry_plugin::Log((level), __VA_ARGS__)
