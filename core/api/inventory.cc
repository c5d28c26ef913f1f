// The plugin inventory of the public C API (ferry.h): the loader's view of
// the transport plugins, for `ferry info` and any application that wants to
// say which transports it can use. It is the same PluginLoader a worker
// uses, so the answer is what a worker started here would see.
#include <ferry/ferry.h>

#include "api/last_error.h"
#include "loader/plugin_loader.h"
#include "transport/describe.h"
#include "transport/transport.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

using ferry::api::Fail;
using ferry::api::Ok;

namespace {

// A list of strings and the array of pointers into it that C callers see.
struct StringList {
  std::vector<std::string> items;
  std::vector<const char*> pointers;

  explicit StringList(std::vector<std::string> list) : items(std::move(list)) {
    for (const std::string& item : items) pointers.push_back(item.c_str());
  }
  uint32_t size() const { return static_cast<uint32_t>(pointers.size()); }
  const char* const* data() const { return pointers.data(); }
};

// What one context of a plugin said about itself: opened once, on the
// plugin's first query, then closed.
struct Probe {
  bool usable = false;
  std::string unusable_reason;
  ferry_context_info_t context{};  // its strings are not kept: see below
  std::string domain, description;
  std::unique_ptr<StringList> capability_names, memory_kind_names;
};

// The instance label the probe contexts get in plugins' logs (and in a
// description that quotes it): `ferry info` is who asks.
constexpr char kProbeInstance[] = "ferry-info";

Probe ProbePlugin(std::shared_ptr<const ferry::Plugin> plugin) {
  Probe probe;
  auto transport = ferry::Transport::Open(std::move(plugin), 0, kProbeInstance);
  if (transport.ok()) {
    probe.usable = true;
    probe.context = transport.value()->info();
    probe.domain = transport.value()->domain();
    probe.description = transport.value()->description();
  } else {
    probe.unusable_reason = transport.status().ToString();
  }
  probe.context.domain = nullptr;  // owned by the context, closed on return
  probe.context.description = nullptr;
  probe.capability_names =
      std::make_unique<StringList>(ferry::CapabilityNames(probe.context.caps));
  probe.memory_kind_names =
      std::make_unique<StringList>(ferry::MemoryKindNames(probe.context.memory_kinds));
  return probe;
}

// Copies `full` into the caller's struct, which may be older (smaller) or
// newer (larger) than ours: only the fields inside both sizes are written.
template <typename T>
void CopyOut(const T& full, T* out) {
  const uint32_t size =
      out->struct_size < sizeof(T) ? out->struct_size : static_cast<uint32_t>(sizeof(T));
  std::memcpy(out, &full, size);
  out->struct_size = size;
}

}  // namespace

// The strings handed out live until release, through later loads too:
// hence deques (growing one moves no element) and probes kept once made.
struct ferry_inventory {
  mutable std::mutex mu;
  ferry::PluginLoader loader;
  std::unique_ptr<StringList> search_dirs;
  std::vector<std::shared_ptr<const ferry::Plugin>> plugins;
  std::deque<std::optional<Probe>> probes;  // one per plugin, once asked
  std::deque<ferry::LoadRecord> failures;
  std::deque<ferry::LoadRecord> filtered;  // left out by FERRY_TRANSPORTS
  size_t records_seen = 0;                 // of loader.records()

  // Lists the plugins not listed yet and the new failed loads; returns the
  // index of the last plugin given.
  uint32_t Add(const std::vector<std::shared_ptr<const ferry::Plugin>>& loaded) {
    size_t at = 0;
    for (const auto& plugin : loaded) {
      at = std::find(plugins.begin(), plugins.end(), plugin) - plugins.begin();
      if (at == plugins.size()) {
        plugins.push_back(plugin);
        probes.emplace_back();
      }
    }
    const std::vector<ferry::LoadRecord>& records = loader.records();
    for (; records_seen < records.size(); ++records_seen) {
      const ferry::LoadRecord& r = records[records_seen];
      if (r.filtered) {
        filtered.push_back(r);
      } else if (!r.loaded) {
        failures.push_back(r);
      }
    }
    return static_cast<uint32_t>(at);
  }
};

namespace {

// Entry i of one of the inventory's record lists (failures, filtered).
ferry_status_t RecordOut(const ferry_inventory_t* inv,
                         std::deque<ferry::LoadRecord> ferry_inventory::*list,
                         const char* function, const char* what, uint32_t i,
                         ferry_load_failure_t* out) {
  FERRY_API_GUARD({
    if (inv == nullptr || out == nullptr ||
        out->struct_size < FERRY_STRUCT_SIZE(ferry_load_failure_t, reason)) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  std::string(function) +
                      ": inventory and out needed, out->struct_size set to "
                      "FERRY_LOAD_FAILURE_STRUCT_SIZE");
    }
    std::lock_guard<std::mutex> lock(inv->mu);
    const std::deque<ferry::LoadRecord>& records = inv->*list;
    if (i >= records.size()) {
      return Fail(FERRY_OUT_OF_RANGE, std::string(function) + ": index " +
                                          std::to_string(i) + " is past the " +
                                          std::to_string(records.size()) + " " + what);
    }
    const ferry::LoadRecord& r = records[i];
    ferry_load_failure_t f{};
    f.struct_size = FERRY_LOAD_FAILURE_STRUCT_SIZE;
    f.path = r.path.c_str();
    f.name = r.name.c_str();
    f.reason = r.reason.c_str();
    CopyOut(f, out);
    return Ok();
  })
}

}  // namespace

extern "C" {

ferry_status_t ferry_inventory_create(ferry_inventory_t** out) {
  FERRY_API_GUARD({
    if (out == nullptr)
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_inventory_create: out is NULL");
    auto inv = std::make_unique<ferry_inventory>();
    inv->search_dirs = std::make_unique<StringList>(inv->loader.options().search_path);
    *out = inv.release();
    return Ok();
  })
}

ferry_status_t ferry_inventory_load(ferry_inventory_t* inv, const char* name_or_path,
                                    uint32_t* index) {
  FERRY_API_GUARD({
    if (inv == nullptr || name_or_path == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_inventory_load: inventory and name needed");
    }
    std::lock_guard<std::mutex> lock(inv->mu);
    auto plugin = inv->loader.Load(name_or_path);
    if (!plugin.ok()) {
      inv->Add({});
      return Fail(plugin.status());
    }
    uint32_t at = inv->Add({plugin.value()});
    if (index != nullptr) *index = at;
    return Ok();
  })
}

ferry_status_t ferry_inventory_load_all(ferry_inventory_t* inv) {
  FERRY_API_GUARD({
    if (inv == nullptr)
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_inventory_load_all: inventory is NULL");
    std::lock_guard<std::mutex> lock(inv->mu);
    inv->Add(inv->loader.LoadAll());
    return Ok();
  })
}

void ferry_inventory_release(ferry_inventory_t* inv) {
  delete inv;
}

ferry_status_t ferry_inventory_get_search(const ferry_inventory_t* inv,
                                          ferry_inventory_search_t* out) {
  FERRY_API_GUARD({
    if (inv == nullptr || out == nullptr ||
        out->struct_size < FERRY_STRUCT_SIZE(ferry_inventory_search_t, dirs)) {
      return Fail(
          FERRY_INVALID_ARGUMENT,
          "ferry_inventory_get_search: inventory and out needed, out->struct_size "
          "set to FERRY_INVENTORY_SEARCH_STRUCT_SIZE");
    }
    std::lock_guard<std::mutex> lock(inv->mu);
    const ferry::LoaderOptions& options = inv->loader.options();
    ferry_inventory_search_t s{};
    s.struct_size = FERRY_INVENTORY_SEARCH_STRUCT_SIZE;
    s.num_dirs = inv->search_dirs->size();
    s.dirs = inv->search_dirs->data();
    s.filter = options.filter.c_str();
    s.abi_major = options.abi_major;
    s.abi_minor_min = options.abi_minor_min;
    s.abi_minor_max = options.abi_minor_max;
    CopyOut(s, out);
    return Ok();
  })
}

uint32_t ferry_inventory_num_plugins(const ferry_inventory_t* inv) {
  if (inv == nullptr) return 0;
  std::lock_guard<std::mutex> lock(inv->mu);
  return static_cast<uint32_t>(inv->plugins.size());
}

ferry_status_t ferry_inventory_plugin(ferry_inventory_t* inv, uint32_t i,
                                      ferry_plugin_info_t* out) {
  FERRY_API_GUARD({
    if (inv == nullptr || out == nullptr ||
        out->struct_size < FERRY_STRUCT_SIZE(ferry_plugin_info_t, path)) {
      return Fail(
          FERRY_INVALID_ARGUMENT,
          "ferry_inventory_plugin: inventory and out needed, out->struct_size set "
          "to FERRY_PLUGIN_INFO_STRUCT_SIZE");
    }
    std::lock_guard<std::mutex> lock(inv->mu);
    if (i >= inv->plugins.size()) {
      return Fail(FERRY_OUT_OF_RANGE,
                  "ferry_inventory_plugin: index " + std::to_string(i) + " is past the " +
                      std::to_string(inv->plugins.size()) + " plugins loaded");
    }
    const ferry::Plugin& p = *inv->plugins[i];
    if (!inv->probes[i]) inv->probes[i] = ProbePlugin(inv->plugins[i]);
    const Probe& probe = *inv->probes[i];
    const ferry_context_info_t& c = probe.context;
    ferry_plugin_info_t info{};
    info.struct_size = FERRY_PLUGIN_INFO_STRUCT_SIZE;
    info.usable = probe.usable ? 1 : 0;
    info.name = p.name().c_str();
    info.version = p.version().c_str();
    info.path = p.path().c_str();
    info.abi_major = p.abi_major();
    info.abi_minor = p.abi_minor();
    info.plugin_minor_min = p.plugin_minor_min();
    info.plugin_minor_max = p.plugin_minor_max();
    info.features = p.features();
    info.unusable_reason = probe.unusable_reason.c_str();
    info.caps = c.caps;
    info.memory_kinds = c.memory_kinds;
    info.capability_names = probe.capability_names->data();
    info.memory_kind_names = probe.memory_kind_names->data();
    info.num_capability_names = probe.capability_names->size();
    info.num_memory_kind_names = probe.memory_kind_names->size();
    info.max_message_size = c.max_message_size;
    info.max_inline_size = c.max_inline_size;
    info.max_header_size = c.max_header_size;
    info.max_segments = c.max_segments;
    info.priority = c.priority;
    info.domain = probe.domain.c_str();
    info.description = probe.description.c_str();
    info.warning = p.warning().c_str();
    CopyOut(info, out);
    return Ok();
  })
}

uint32_t ferry_inventory_num_failures(const ferry_inventory_t* inv) {
  if (inv == nullptr) return 0;
  std::lock_guard<std::mutex> lock(inv->mu);
  return static_cast<uint32_t>(inv->failures.size());
}

ferry_status_t ferry_inventory_failure(const ferry_inventory_t* inv, uint32_t i,
                                       ferry_load_failure_t* out) {
  return RecordOut(inv, &ferry_inventory::failures, "ferry_inventory_failure",
                   "failed loads", i, out);
}

uint32_t ferry_inventory_num_filtered(const ferry_inventory_t* inv) {
  if (inv == nullptr) return 0;
  std::lock_guard<std::mutex> lock(inv->mu);
  return static_cast<uint32_t>(inv->filtered.size());
}

ferry_status_t ferry_inventory_filtered(const ferry_inventory_t* inv, uint32_t i,
                                        ferry_load_failure_t* out) {
  return RecordOut(inv, &ferry_inventory::filtered, "ferry_inventory_filtered",
                   "plugins left out", i, out);
}

}  // extern "C"
