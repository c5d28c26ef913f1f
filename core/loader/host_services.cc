#include "loader/host_services.h"

#include "common/log.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace ferry {
namespace {

struct ParamStore {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, std::string> values;
};

ParamStore& Params() {
  static ParamStore* store = new ParamStore();  // never destroyed: plugins
  return *store;                                // may log/query at exit
}

void HostLog(void* /*host_ctx*/, int32_t level, const char* plugin, const char* message) {
  std::string component = "plugin:";
  component += plugin != nullptr ? plugin : "?";
  log::Write(level, component.c_str(), message != nullptr ? message : "");
}

int64_t CopyOut(const std::string& value, char* buf, uint64_t buf_len) {
  if (buf != nullptr && buf_len > 0) {
    size_t n = value.size() < buf_len - 1 ? value.size() : buf_len - 1;
    std::memcpy(buf, value.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int64_t>(value.size());
}

int64_t HostGetParam(void* /*host_ctx*/, const char* plugin, const char* key, char* buf,
                     uint64_t buf_len) {
  if (plugin == nullptr || key == nullptr) return -1;
  {
    ParamStore& store = Params();
    std::lock_guard<std::mutex> lock(store.mu);
    auto it = store.values.find({plugin, key});
    if (it != store.values.end()) return CopyOut(it->second, buf, buf_len);
  }
  const char* env = std::getenv(PluginParamEnvName(plugin, key).c_str());
  if (env == nullptr) return -1;
  return CopyOut(env, buf, buf_len);
}

// The table is built once; log_level tracks the core's level on each read
// through HostServices().
ferry_host_services_t* Table() {
  static ferry_host_services_t* table = [] {
    auto* t = new ferry_host_services_t{};
    t->struct_size = sizeof(ferry_host_services_t);
    t->log_level = log::Level();
    t->host_ctx = nullptr;
    t->log = &HostLog;
    t->get_param = &HostGetParam;
    return t;
  }();
  return table;
}

}  // namespace

const ferry_host_services_t* HostServices() {
  ferry_host_services_t* t = Table();
  // Written only when the level changed (rare, from configuration), so
  // plugin threads reading it see no racing stores in steady state.
  int32_t level = log::Level();
  if (t->log_level != level) t->log_level = level;
  return t;
}

void SetPluginParam(const std::string& plugin, const std::string& key,
                    const std::string& value) {
  ParamStore& store = Params();
  std::lock_guard<std::mutex> lock(store.mu);
  store.values[{plugin, key}] = value;
}

void ClearPluginParam(const std::string& plugin, const std::string& key) {
  ParamStore& store = Params();
  std::lock_guard<std::mutex> lock(store.mu);
  store.values.erase({plugin, key});
}

std::string PluginParamEnvName(const std::string& plugin, const std::string& key) {
  std::string name = "FERRY_";
  for (char c : plugin + "_" + key) {
    name += std::isalnum(static_cast<unsigned char>(c))
                ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                : '_';
  }
  return name;
}

}  // namespace ferry
