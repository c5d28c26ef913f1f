#include "ferry_plugin/host.h"

#include <atomic>

namespace ferry_plugin {
namespace {
std::atomic<const ferry_host_services_t*> g_host{nullptr};
std::atomic<const char*> g_name{"plugin"};
}  // namespace

void SetHostServices(const ferry_host_services_t* host) {
  if (host != nullptr) g_host.store(host, std::memory_order_release);
}

const ferry_host_services_t* HostServices() {
  return g_host.load(std::memory_order_acquire);
}

void SetPluginName(const char* name) {
  if (name != nullptr) g_name.store(name, std::memory_order_release);
}

const char* PluginName() {
  return g_name.load(std::memory_order_acquire);
}

}  // namespace ferry_plugin
