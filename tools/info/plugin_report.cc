#include "info/plugin_report.h"

#include "transport/describe.h"
#include "transport/transport.h"

#include <sstream>
#include <string>
#include <utility>

namespace ferry::info {
namespace {

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

PluginReport Probe(std::shared_ptr<const Plugin> plugin) {
  PluginReport report;
  report.plugin = plugin;
  auto transport = Transport::Open(std::move(plugin), 0, "ferry-info");
  if (!transport.ok()) {
    report.unusable_reason = transport.status().ToString();
    return report;
  }
  report.usable = true;
  report.context = transport.value()->info();
  report.domain = transport.value()->domain();
  report.description = transport.value()->description();
  report.context.domain = nullptr;  // owned by the transport, gone after this
  report.context.description = nullptr;
  return report;
}

std::string FormatText(const std::vector<PluginReport>& plugins,
                       const std::vector<LoadRecord>& failures,
                       const LoaderOptions& options) {
  std::ostringstream out;
  out << "ferry transport plugins\n";
  out << "  search path: ";
  for (size_t i = 0; i < options.search_path.size(); ++i) {
    out << (i ? ":" : "") << options.search_path[i];
  }
  out << "\n  filter:      "
      << (options.filter.empty() ? "(none; FERRY_TRANSPORTS unset)" : "FERRY_TRANSPORTS=" + options.filter)
      << "\n  host ABI:    " << options.abi_major << "." << options.abi_minor_min << " - "
      << options.abi_major << "." << options.abi_minor_max << "\n\n";
  if (plugins.empty()) out << "No plugin loaded.\n\n";
  for (const PluginReport& r : plugins) {
    const Plugin& p = *r.plugin;
    out << p.name() << "  (version " << (p.version().empty() ? "?" : p.version()) << ")\n";
    out << "  file          " << p.path() << "\n";
    out << "  ABI           " << p.abi_major() << "." << p.abi_minor() << " chosen; plugin supports "
        << p.abi_major() << "." << p.plugin_minor_min() << " - " << p.abi_major() << "."
        << p.plugin_minor_max() << "\n";
    if (!r.usable) {
      out << "  usable        no: " << r.unusable_reason << "\n\n";
      continue;
    }
    const ferry_context_info_t& c = r.context;
    out << "  usable        yes\n";
    out << "  capabilities  " << Join(CapabilityNames(c.caps)) << "\n";
    out << "  memory kinds  " << Join(MemoryKindNames(c.memory_kinds)) << "\n";
    out << "  limits        message " << Bytes(c.max_message_size) << ", header "
        << Bytes(c.max_header_size) << ", inline " << Bytes(c.max_inline_size) << ", "
        << c.max_segments << " segments\n";
    out << "  domain        " << (r.domain.empty() ? "(any: reachable from every host)" : r.domain) << "\n";
    out << "  priority      " << c.priority << "\n";
    if (!r.description.empty()) out << "  description   " << r.description << "\n";
    out << "\n";
  }
  if (failures.empty()) {
    out << "No failed load attempts.\n";
  } else {
    out << "Failed load attempts:\n";
    for (const LoadRecord& f : failures) {
      out << "  " << f.path << (f.name.empty() ? "" : " (" + f.name + ")") << "\n      "
          << f.reason << "\n";
    }
  }
  return out.str();
}

nlohmann::json FormatJson(const std::vector<PluginReport>& plugins,
                          const std::vector<LoadRecord>& failures,
                          const LoaderOptions& options) {
  nlohmann::json j;
  j["search_path"] = options.search_path;
  j["filter"] = options.filter;
  j["host_abi"] = {{"major", options.abi_major},
                   {"minor_min", options.abi_minor_min},
                   {"minor_max", options.abi_minor_max}};
  j["plugins"] = nlohmann::json::array();
  for (const PluginReport& r : plugins) {
    const Plugin& p = *r.plugin;
    nlohmann::json e = {
        {"name", p.name()},
        {"version", p.version()},
        {"file", p.path()},
        {"abi", {{"major", p.abi_major()}, {"minor", p.abi_minor()},
                 {"plugin_minor_min", p.plugin_minor_min()},
                 {"plugin_minor_max", p.plugin_minor_max()}}},
        {"usable", r.usable},
    };
    if (!r.usable) {
      e["unusable_reason"] = r.unusable_reason;
    } else {
      const ferry_context_info_t& c = r.context;
      e["capabilities"] = CapabilityNames(c.caps);
      e["memory_kinds"] = MemoryKindNames(c.memory_kinds);
      e["max_message_size"] = c.max_message_size;
      e["max_header_size"] = c.max_header_size;
      e["max_inline_size"] = c.max_inline_size;
      e["max_segments"] = c.max_segments;
      e["domain"] = r.domain;
      e["priority"] = c.priority;
      e["description"] = r.description;
    }
    j["plugins"].push_back(e);
  }
  j["failed"] = nlohmann::json::array();
  for (const LoadRecord& f : failures) {
    j["failed"].push_back({{"path", f.path}, {"name", f.name}, {"reason", f.reason}});
  }
  return j;
}

}  // namespace ferry::info
