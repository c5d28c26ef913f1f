#include "ferry_plugin/log.h"

#include "ferry_plugin/host.h"

#include <ferry/transport.h>

#include <cstdarg>
#include <cstdio>

namespace ferry_plugin {

void Log(int32_t level, const char* fmt, ...) {
  const ferry_host_services_t* host = HostServices();
  if (host == nullptr || !FERRY_FIELD_PRESENT(host, ferry_host_services_t, log) ||
      host->log == nullptr || level > host->log_level) {
    return;
  }
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  host->log(host->host_ctx, level, PluginName(), line);
}

}  // namespace ferry_plugin
