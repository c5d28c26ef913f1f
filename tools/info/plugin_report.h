// What `ferry info` reports, read through libferry's plugin inventory
// (ferry.h), and its two renderings: text for people, JSON for programs.
#pragma once

#include <ferry/ferry.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ferry::info {

// A snapshot of an inventory: every string in it is borrowed from the
// inventory, which must outlive the report.
struct Report {
  ferry_inventory_search_t search{};
  std::vector<ferry_plugin_info_t> plugins;
  std::vector<ferry_load_failure_t> failures;
  std::vector<ferry_load_failure_t> filtered;  // left out by FERRY_TRANSPORTS
};

// Reads the plugins at `indices` (in that order; querying a plugin opens and
// closes one context of it), every failed load and every plugin the filter
// left out.
Report Read(ferry_inventory_t* inventory, const std::vector<uint32_t>& indices);

std::string FormatText(const Report& report);
nlohmann::json FormatJson(const Report& report);

}  // namespace ferry::info
