// Logging and parameters through the host (ferry_plugin::HostServices()).
#pragma once

#include "ferry_plugin/host.h"
#include "ferry_plugin/status.h"

namespace ferry_chaos {

using ferry_plugin::Error;
using ferry_plugin::Format;
using ferry_plugin::HostServices;
using ferry_plugin::SetHostServices;
using ferry_plugin::Status;

constexpr const char* kPluginName = "chaos";

}  // namespace ferry_chaos

#define CHAOS_LOG(level, ...) \
  ferry_host_logf(::ferry_plugin::HostServices(), (level), "chaos", __VA_ARGS__)
