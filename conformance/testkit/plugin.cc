#include "testkit/plugin.h"

#include <map>
#include <mutex>
#include <utility>

namespace ferry::testkit {

StatusOr<std::shared_ptr<const Plugin>> LoadPlugin(const std::string& dir,
                                                   const std::string& name) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::shared_ptr<const Plugin>>
      loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find({dir, name});
  if (it != loaded.end()) return it->second;
  LoaderOptions options;
  options.search_path = {dir};
  PluginLoader loader(options);
  auto plugin = loader.Load(name);
  if (plugin.ok()) loaded[{dir, name}] = plugin.value();
  return plugin;
}

}  // namespace ferry::testkit
