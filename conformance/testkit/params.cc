#include "testkit/params.h"

#include "loader/host_services.h"

namespace ferry::testkit {

ScopedParams::ScopedParams(std::string plugin,
                           std::initializer_list<std::pair<std::string, std::string>> kv)
    : plugin_(std::move(plugin)) {
  for (const auto& [key, value] : kv) Set(key, value);
}

ScopedParams::~ScopedParams() {
  for (const std::string& key : keys_) ClearPluginParam(plugin_, key);
}

void ScopedParams::Set(const std::string& key, const std::string& value) {
  SetPluginParam(plugin_, key, value);
  keys_.push_back(key);
}

}  // namespace ferry::testkit
