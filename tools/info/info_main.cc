// ferry-info (`ferry info`): which transport plugins load here, what each
// offers, whether it can run on this machine and, if not, why; and every
// load attempt that failed, with its reason.
// It reads everything through libferry's public plugin inventory (ferry.h),
// so it sees exactly what an application linking libferry sees.
#include "info/plugin_report.h"

#include <ferry/ferry.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

// "NOT_FOUND: <message>", the way the core words a failed status.
std::string StatusText(ferry_status_t code, const std::string& message) {
  std::string out = ferry_status_name(code);
  if (out == "UNKNOWN_STATUS") out = "STATUS_" + std::to_string(code);
  return message.empty() ? out : out + ": " + message;
}

}  // namespace

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
          "Exit status: 0; 1 when a plugin named on the command line does not\n"
          "load or cannot run here; 2 for a bad option.\n\n"
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

  ferry_inventory_t* raw = nullptr;
  if (ferry_status_t st = ferry_inventory_create(&raw); st != FERRY_OK) {
    std::fprintf(stderr, "ferry info: %s\n", StatusText(st, ferry_last_error()).c_str());
    return 1;
  }
  std::unique_ptr<ferry_inventory_t, void (*)(ferry_inventory_t*)> inventory(
      raw, ferry_inventory_release);
  std::vector<uint32_t> listed;  // the plugins to report, in order
  int rc = 0;
  if (wanted.empty()) {
    ferry_inventory_load_all(inventory.get());
    for (uint32_t i = 0, n = ferry_inventory_num_plugins(inventory.get()); i < n; ++i) {
      listed.push_back(i);
    }
  } else {
    for (const std::string& w : wanted) {
      uint32_t index = 0;
      ferry_status_t st = ferry_inventory_load(inventory.get(), w.c_str(), &index);
      if (st == FERRY_OK) {
        listed.push_back(index);
      } else {
        std::fprintf(stderr, "ferry info: %s\n",
                     StatusText(st, ferry_last_error()).c_str());
        rc = 1;
      }
    }
  }
  const ferry::info::Report report = ferry::info::Read(inventory.get(), listed);
  // A plugin asked about by name or path that cannot run here is a failure
  // too (scripts check `ferry info tcp` before they start workers).
  if (!wanted.empty()) {
    for (const ferry_plugin_info_t& p : report.plugins) {
      if (!p.usable) rc = 1;
    }
  }
  if (json) {
    std::cout << ferry::info::FormatJson(report).dump(2) << "\n";
  } else {
    std::cout << ferry::info::FormatText(report);
  }
  return rc;
}
