#include "harness/plugin_cases.h"

namespace ferry::conformance {

std::vector<PluginCase>& PluginCases() {
  static std::vector<PluginCase> cases;
  return cases;
}

std::vector<PluginParam>& PluginParams() {
  static std::vector<PluginParam> params;
  return params;
}

RunOptions& Options() {
  static RunOptions options;
  return options;
}

void PrintTo(const PluginParam& param, std::ostream* os) {
  *os << PluginCases().at(param.index).label;
}

std::string PluginParamName(const ::testing::TestParamInfo<PluginParam>& info) {
  return PluginCases().at(info.param.index).label;
}

}  // namespace ferry::conformance
