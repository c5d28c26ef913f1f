// The host services table a plugin received at negotiation, kept for logging
// and parameters. Each plugin links its own copy of this library (hidden
// visibility), so every plugin keeps its own table.
#pragma once

#include <ferry/transport.h>

namespace ferry_plugin {

void SetHostServices(const ferry_host_services_t* host);  // NULL is ignored
const ferry_host_services_t* HostServices();

// The plugin's name ("tcp"), set once at negotiation; prefixes the messages
// of the entry shim (entry.h) and names its logs (log.h). Default "plugin".
void SetPluginName(const char* name);  // static storage: not copied
const char* PluginName();

}  // namespace ferry_plugin
