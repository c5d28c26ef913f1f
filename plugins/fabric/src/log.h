// Logging through the host's log service (the only way a plugin may talk to
// the host outside the vtable). The table comes from negotiation and lives
// until process exit, so one process-wide pointer is enough.
#pragma once

#include <ferry/transport.h>

namespace ferry_fabric {

void SetHostServices(const ferry_host_services_t* host);
const ferry_host_services_t* HostServices();

}  // namespace ferry_fabric

// FAB_LOG(FERRY_LOG_WARN, "fmt", ...): formatted only when the host's level
// lets the line through.
#define FAB_LOG(level, ...) \
  ferry_host_logf(::ferry_fabric::HostServices(), (level), "fabric", __VA_ARGS__)
