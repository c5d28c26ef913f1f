// Logging through the host (plugins log only through ferry_host_services_t).
#pragma once

#include "ferry_plugin/host.h"

namespace ferry_shm {

using ferry_plugin::HostServices;
using ferry_plugin::SetHostServices;

}  // namespace ferry_shm

#define SHM_LOG(level, ...) \
  ferry_host_logf(::ferry_plugin::HostServices(), (level), "shm", __VA_ARGS__)
