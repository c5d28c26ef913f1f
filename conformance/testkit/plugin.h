// Loading a plugin the way the core does: through the production loader
// (ferry::PluginLoader), from one directory, so a test exercises the same
// negotiation and vtable checks a real host runs.
#pragma once

#include "common/status.h"
#include "loader/plugin_loader.h"

#include <memory>
#include <string>

namespace ferry::testkit {

// libferry-<name>.so from `dir`. Loaded once per process: later calls with
// the same dir and name return the same Plugin (a failure is retried).
StatusOr<std::shared_ptr<const Plugin>> LoadPlugin(const std::string& dir,
                                                   const std::string& name);

}  // namespace ferry::testkit
