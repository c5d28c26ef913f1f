// The non-template half of the entry shim (entry.h).
#include "ferry_plugin/entry.h"

#include <cstring>

namespace ferry_plugin {

void ReportInternal(const char* entry, ferry_error_buf_t* err, const char* what) {
  if (err != nullptr) {
    ferry_error_printf(err, "%s: internal error in %s: %s", PluginName(), entry, what);
  }
  ferry_host_logf(HostServices(), FERRY_LOG_ERROR, PluginName(),
                  "internal error in %s: %s", entry, what);
}

Status BadHandle(const char* entry, const char* what) {
  return Error(FERRY_INVALID_ARGUMENT, "%s: %s() got an invalid %s handle", PluginName(),
               entry, what);
}

Status BadArgs(const char* entry, const char* type, uint32_t got, size_t need) {
  return Error(FERRY_INVALID_ARGUMENT,
               "%s: %s() needs a %s with struct_size >= %zu (got %u)", PluginName(),
               entry, type, need, got);
}

Status CopyString(const std::string& s, char* buf, uint64_t buf_len) {
  if (buf == nullptr || buf_len < s.size() + 1) {
    if (buf != nullptr && buf_len > 0) buf[0] = '\0';
    return Error(FERRY_RESOURCE_EXHAUSTED, "%s: the address needs %zu bytes",
                 PluginName(), s.size() + 1);
  }
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return Status();
}

}  // namespace ferry_plugin
