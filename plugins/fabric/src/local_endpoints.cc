#include "local_endpoints.h"

#include <map>
#include <mutex>

namespace ferry_fabric {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> live;
};

Registry& Get() {
  static Registry* r = new Registry();  // never destroyed: used until exit
  return *r;
}

std::string Key(const std::string& provider, const std::string& name) {
  return provider + '\0' + name;
}

}  // namespace

std::shared_ptr<std::atomic<bool>> LocalEndpoints::Register(const std::string& provider,
                                                            const std::string& name) {
  auto flag = std::make_shared<std::atomic<bool>>(true);
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live[Key(provider, name)] = flag;
  return flag;
}

void LocalEndpoints::Unregister(const std::string& provider, const std::string& name,
                                const std::shared_ptr<std::atomic<bool>>& flag) {
  if (!flag) return;
  flag->store(false, std::memory_order_release);
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(Key(provider, name));
  if (it != r.live.end() && it->second == flag) r.live.erase(it);
}

LocalEndpoints::Token LocalEndpoints::Find(const std::string& provider,
                                           const std::string& name) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(Key(provider, name));
  if (it == r.live.end()) return nullptr;
  return it->second;
}

}  // namespace ferry_fabric
