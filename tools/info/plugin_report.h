// What `ferry info` knows about one plugin: the loader's facts plus, when a
// context could be opened, what the context says about itself.
#pragma once

#include "loader/plugin_loader.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace ferry::info {

struct PluginReport {
  std::shared_ptr<const Plugin> plugin;
  bool usable = false;
  std::string unusable_reason;  // init's message when not usable
  ferry_context_info_t context{};
  std::string domain, description;
};

// Opens (and closes) one context of `plugin` to learn whether it can run
// here and what it offers.
PluginReport Probe(std::shared_ptr<const Plugin> plugin);

std::string FormatText(const std::vector<PluginReport>& plugins,
                       const std::vector<LoadRecord>& failures,
                       const LoaderOptions& options);
nlohmann::json FormatJson(const std::vector<PluginReport>& plugins,
                          const std::vector<LoadRecord>& failures,
                          const LoaderOptions& options);

}  // namespace ferry::info
