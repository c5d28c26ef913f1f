// What the runner tests: one PluginCase per plugin named on the command line
// (or found by the loader), including those that failed to load (they are
// reported as a LOAD-1 failure, never silently dropped). The gtest parameter
// is an index into this list, filled before InitGoogleTest registers the
// value-parametrized tests (UCX's "instantiate per transport found at run
// time").
#pragma once

#include "common/status.h"
#include "loader/plugin_loader.h"

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace ferry::conformance {

struct PluginCase {
  std::string label;      // gtest-safe name: "tcp", "fx_wrong_major"
  std::string requested;  // as named on the command line, or the file found
  std::shared_ptr<const Plugin> plugin;  // null when loading failed
  Status load_status;                    // why it failed to load
};

struct PluginParam {
  size_t index = 0;
};
void PrintTo(const PluginParam& param, std::ostream* os);
std::string PluginParamName(const ::testing::TestParamInfo<PluginParam>& info);

std::vector<PluginCase>& PluginCases();
// Built from PluginCases(); what INSTANTIATE_TEST_SUITE_P iterates.
std::vector<PluginParam>& PluginParams();

struct RunOptions {
  bool strict = false;   // not-run counts as failure
  std::string self_exe;  // this binary, re-executed for --peer processes
};
RunOptions& Options();

}  // namespace ferry::conformance
