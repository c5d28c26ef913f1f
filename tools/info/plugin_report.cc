#include "info/plugin_report.h"

#include <sstream>
#include <string>

namespace ferry::info {
namespace {

std::vector<std::string> Strings(const char* const* items, uint32_t n) {
  return std::vector<std::string>(items, items + n);
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out.empty() ? "none" : out;
}

std::string Bytes(uint64_t n) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (n >= 1024 && n % 1024 == 0 && unit < 5) n /= 1024, ++unit;
  return std::to_string(n) + " " + kUnits[unit];
}

}  // namespace

Report Read(ferry_inventory_t* inventory, const std::vector<uint32_t>& indices) {
  Report report;
  report.search.struct_size = FERRY_INVENTORY_SEARCH_STRUCT_SIZE;
  ferry_inventory_get_search(inventory, &report.search);
  for (uint32_t i : indices) {
    ferry_plugin_info_t info{};
    info.struct_size = FERRY_PLUGIN_INFO_STRUCT_SIZE;
    if (ferry_inventory_plugin(inventory, i, &info) == FERRY_OK)
      report.plugins.push_back(info);
  }
  auto read_records = [inventory](uint32_t n, auto get) {
    std::vector<ferry_load_failure_t> out;
    for (uint32_t i = 0; i < n; ++i) {
      ferry_load_failure_t r{};
      r.struct_size = FERRY_LOAD_FAILURE_STRUCT_SIZE;
      if (get(inventory, i, &r) == FERRY_OK) out.push_back(r);
    }
    return out;
  };
  report.failures =
      read_records(ferry_inventory_num_failures(inventory), ferry_inventory_failure);
  report.filtered =
      read_records(ferry_inventory_num_filtered(inventory), ferry_inventory_filtered);
  return report;
}

std::string FormatText(const Report& report) {
  const ferry_inventory_search_t& s = report.search;
  std::ostringstream out;
  out << "ferry transport plugins\n";
  out << "  search path: ";
  for (uint32_t i = 0; i < s.num_dirs; ++i) out << (i ? ":" : "") << s.dirs[i];
  const std::string filter = s.filter;
  out << "\n  filter:      "
      << (filter.empty() ? "(none; FERRY_TRANSPORTS unset)"
                         : "FERRY_TRANSPORTS=" + filter)
      << "\n  host ABI:    " << s.abi_major << "." << s.abi_minor_min << " - "
      << s.abi_major << "." << s.abi_minor_max << "\n\n";
  if (report.plugins.empty()) out << "No plugin loaded.\n\n";
  for (const ferry_plugin_info_t& p : report.plugins) {
    const std::string version = p.version;
    out << p.name << "  (version " << (version.empty() ? "?" : version) << ")\n";
    out << "  file          " << p.path << "\n";
    out << "  ABI           " << p.abi_major << "." << p.abi_minor
        << " chosen; plugin supports " << p.abi_major << "." << p.plugin_minor_min
        << " - " << p.abi_major << "." << p.plugin_minor_max << "\n";
    if (p.warning != nullptr && p.warning[0] != '\0') {
      out << "  warning       " << p.warning << "\n";
    }
    if (!p.usable) {
      out << "  usable        no: " << p.unusable_reason << "\n\n";
      continue;
    }
    const std::string domain = p.domain, description = p.description;
    out << "  usable        yes\n";
    out << "  capabilities  " << Join(Strings(p.capability_names, p.num_capability_names))
        << "\n";
    out << "  memory kinds  "
        << Join(Strings(p.memory_kind_names, p.num_memory_kind_names)) << "\n";
    out << "  limits        message " << Bytes(p.max_message_size) << ", header "
        << Bytes(p.max_header_size) << ", inline " << Bytes(p.max_inline_size) << ", "
        << p.max_segments << " segments\n";
    out << "  domain        "
        << (domain.empty() ? "(any: reachable from every host)" : domain) << "\n";
    out << "  priority      " << p.priority << "\n";
    if (!description.empty()) out << "  description   " << description << "\n";
    out << "\n";
  }
  if (!report.filtered.empty()) {
    out << "Left out by the filter (not loaded):\n";
    for (const ferry_load_failure_t& f : report.filtered) {
      out << "  " << f.name << "  " << f.path << "\n      " << f.reason << "\n";
    }
    out << "\n";
  }
  if (report.failures.empty()) {
    out << "No failed load attempts.\n";
  } else {
    out << "Failed load attempts:\n";
    for (const ferry_load_failure_t& f : report.failures) {
      const std::string name = f.name;
      out << "  " << f.path << (name.empty() ? "" : " (" + name + ")") << "\n      "
          << f.reason << "\n";
    }
  }
  return out.str();
}

nlohmann::json FormatJson(const Report& report) {
  const ferry_inventory_search_t& s = report.search;
  nlohmann::json j;
  j["search_path"] = Strings(s.dirs, s.num_dirs);
  j["filter"] = s.filter;
  j["host_abi"] = {{"major", s.abi_major},
                   {"minor_min", s.abi_minor_min},
                   {"minor_max", s.abi_minor_max}};
  j["plugins"] = nlohmann::json::array();
  for (const ferry_plugin_info_t& p : report.plugins) {
    nlohmann::json e = {
        {"name", p.name},
        {"version", p.version},
        {"file", p.path},
        {"abi",
         {{"major", p.abi_major},
          {"minor", p.abi_minor},
          {"plugin_minor_min", p.plugin_minor_min},
          {"plugin_minor_max", p.plugin_minor_max}}},
        {"usable", p.usable != 0},
    };
    if (p.warning != nullptr && p.warning[0] != '\0') e["warning"] = p.warning;
    if (!p.usable) {
      e["unusable_reason"] = p.unusable_reason;
    } else {
      e["capabilities"] = Strings(p.capability_names, p.num_capability_names);
      e["memory_kinds"] = Strings(p.memory_kind_names, p.num_memory_kind_names);
      e["max_message_size"] = p.max_message_size;
      e["max_header_size"] = p.max_header_size;
      e["max_inline_size"] = p.max_inline_size;
      e["max_segments"] = p.max_segments;
      e["domain"] = p.domain;
      e["priority"] = p.priority;
      e["description"] = p.description;
    }
    j["plugins"].push_back(e);
  }
  auto records = [](const std::vector<ferry_load_failure_t>& list) {
    nlohmann::json a = nlohmann::json::array();
    for (const ferry_load_failure_t& f : list) {
      a.push_back({{"path", f.path}, {"name", f.name}, {"reason", f.reason}});
    }
    return a;
  };
  j["failed"] = records(report.failures);
  j["filtered"] = records(report.filtered);
  return j;
}

}  // namespace ferry::info
