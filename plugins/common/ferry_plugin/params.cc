#include "ferry_plugin/params.h"

#include "ferry_plugin/host.h"

#include <ferry/transport.h>

#include <cctype>

namespace ferry_plugin {

ParamText GetParamText(const char* key, std::string* out) {
  const ferry_host_services_t* host = HostServices();
  if (host == nullptr || !FERRY_FIELD_PRESENT(host, ferry_host_services_t, get_param) ||
      host->get_param == nullptr) {
    return ParamText::kUnset;
  }
  char buf[1024];
  const int64_t n = host->get_param(host->host_ctx, PluginName(), key, buf, sizeof buf);
  if (n < 0) return ParamText::kUnset;
  if (static_cast<uint64_t>(n) >= sizeof buf) {
    out->assign(buf, sizeof buf - 1);
    return ParamText::kTooLong;
  }
  out->assign(buf, static_cast<size_t>(n));
  return ParamText::kSet;
}

std::string StringParam(const char* key, const std::string& fallback) {
  std::string v;
  switch (GetParamText(key, &v)) {
    case ParamText::kSet:
      return v;
    case ParamText::kTooLong:
      ferry_host_logf(HostServices(), FERRY_LOG_WARN, PluginName(),
                      "parameter %s (%s) is longer than 1023 bytes; ignored", key,
                      ParamEnvName(key).c_str());
      return fallback;
    case ParamText::kUnset:
      break;
  }
  return fallback;
}

uint64_t IntParam(const char* key, uint64_t fallback, uint64_t lo, uint64_t hi) {
  const int64_t v = ferry_host_param_int(HostServices(), PluginName(), key,
                                         static_cast<int64_t>(fallback));
  uint64_t clamped = v < 0 ? lo : static_cast<uint64_t>(v);
  if (clamped < lo) clamped = lo;
  if (clamped > hi) clamped = hi;
  if (v < 0 || static_cast<uint64_t>(v) != clamped) {
    ferry_host_logf(HostServices(), FERRY_LOG_WARN, PluginName(),
                    "parameter %s=%lld is outside [%llu, %llu]; using %llu "
                    "(%s or the in-process setting)",
                    key, static_cast<long long>(v), static_cast<unsigned long long>(lo),
                    static_cast<unsigned long long>(hi),
                    static_cast<unsigned long long>(clamped), ParamEnvName(key).c_str());
  }
  return clamped;
}

std::string ParamEnvName(const char* key) {
  std::string s = "FERRY_";
  for (const char* p = PluginName(); *p != '\0'; ++p) {
    s += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  }
  s += '_';
  for (const char* p = key; *p != '\0'; ++p) {
    s += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  }
  return s;
}

}  // namespace ferry_plugin
