// The ferry_host_services_t table the loader offers every plugin: logging
// into the core's logger and namespaced parameters (in-process settings
// first, then FERRY_<PLUGIN>_<KEY> from the environment).
#pragma once

#include <ferry/transport.h>

#include <string>

namespace ferry {

// The process-wide table; valid until exit (plugins keep the pointer).
const ferry_host_services_t* HostServices();

// In-process parameter settings: these win over the environment. Used by the
// core's configuration and by tests ("tcp", "busy_poll", "1").
void SetPluginParam(const std::string& plugin, const std::string& key,
                    const std::string& value);
void ClearPluginParam(const std::string& plugin, const std::string& key);

// The name of the environment variable for a parameter: FERRY_TCP_BUSY_POLL.
std::string PluginParamEnvName(const std::string& plugin, const std::string& key);

}  // namespace ferry
