// Logging through the host (plugins log only through ferry_host_services_t).
#pragma once

#include "ferry_plugin/host.h"

namespace ferry_fabric {

using ferry_plugin::HostServices;
using ferry_plugin::SetHostServices;

}  // namespace ferry_fabric

#define FAB_LOG(level, ...) \
  ferry_host_logf(::ferry_plugin::HostServices(), (level), "fabric", __VA_ARGS__)
