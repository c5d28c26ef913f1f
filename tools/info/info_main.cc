// ferry-info (`ferry info`): which transport plugins load here, what each
// offers, whether it can run on this machine and, if not, why; and every
// load attempt that failed, with its reason.
#include "info/plugin_report.h"

#include "loader/plugin_loader.h"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  bool json = false;
  std::vector<std::string> wanted;  // names or paths; empty = everything found
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: ferry info [--json] [NAME|PATH ...]\n\n"
          "Lists every transport plugin found on the search path (or only the\n"
          "ones named), what each offers, whether it is usable here, and every\n"
          "load attempt that failed.\n\n"
          "Environment: FERRY_PLUGIN_PATH (extra directories, ':'-separated),\n"
          "FERRY_TRANSPORTS (\"tcp,shm\" keeps, \"^shm\" drops), FERRY_LOG_LEVEL.\n");
      return 0;
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "ferry info: unknown option %s (see --help)\n", argv[i]);
      return 2;
    } else {
      wanted.emplace_back(argv[i]);
    }
  }

  ferry::PluginLoader loader;
  std::vector<std::shared_ptr<const ferry::Plugin>> plugins;
  int rc = 0;
  if (wanted.empty()) {
    plugins = loader.LoadAll();
  } else {
    for (const std::string& w : wanted) {
      auto plugin = loader.Load(w);
      if (plugin.ok()) {
        plugins.push_back(plugin.value());
      } else {
        std::fprintf(stderr, "ferry info: %s\n", plugin.status().ToString().c_str());
        rc = 1;
      }
    }
  }
  std::vector<ferry::info::PluginReport> reports;
  for (const auto& p : plugins) reports.push_back(ferry::info::Probe(p));
  std::vector<ferry::LoadRecord> failures;
  for (const auto& r : loader.records()) {
    if (!r.loaded) failures.push_back(r);
  }
  if (json) {
    std::cout << ferry::info::FormatJson(reports, failures, loader.options()).dump(2) << "\n";
  } else {
    std::cout << ferry::info::FormatText(reports, failures, loader.options());
  }
  return rc;
}
