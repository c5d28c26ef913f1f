// Finds transport plugins, loads them with Boost.DLL (RTLD_LOCAL, never
// unloaded by default), negotiates the ABI and checks the vtable. Every
// refusal is a load record with a reason that says what to do; a broken
// plugin never crashes the host.
//
// Search order for a name ("tcp" -> libferry-tcp.so):
//   1. the directories of FERRY_PLUGIN_PATH (':'-separated), in order;
//   2. <dir of the ferry core>/../lib/ferry/plugins (build and install trees
//      share this layout), then <dir of the ferry core>/ferry/plugins;
//   3. the compiled-in install directory (<prefix>/lib/ferry/plugins).
// A string containing '/' or ending in ".so" is a path and is loaded as is.
// FERRY_TRANSPORTS filters names: "tcp,shm" keeps only those, "^shm,fabric"
// drops those. An explicit path is never filtered: the user named the file.
#pragma once

#include "common/status.h"

#include <ferry/transport.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

// One negotiated plugin library. Immutable once loaded; shared by every
// context opened from it. The library stays mapped for the process's life
// unless the loader was built with unload_on_release.
class Plugin {
 public:
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }
  // What the loader noticed ("" if nothing): LoadRecord::warning.
  const std::string& warning() const { return warning_; }
  uint32_t abi_major() const { return abi_major_; }
  uint32_t abi_minor() const { return abi_minor_; }
  uint32_t plugin_minor_min() const { return plugin_minor_min_; }
  uint32_t plugin_minor_max() const { return plugin_minor_max_; }
  uint64_t features() const { return features_; }
  const ferry_transport_vtable_t* vtable() const { return vtable_; }
  ferry_transport_negotiate_fn entry() const { return entry_; }

 private:
  friend class PluginLoader;
  Plugin() = default;
  struct Library;  // keeps the Boost.DLL handle
  std::unique_ptr<Library> library_;
  std::string name_, version_, path_, warning_;
  uint32_t abi_major_ = 0, abi_minor_ = 0;
  uint32_t plugin_minor_min_ = 0, plugin_minor_max_ = 0;
  uint64_t features_ = 0;
  const ferry_transport_vtable_t* vtable_ = nullptr;
  ferry_transport_negotiate_fn entry_ = nullptr;
};

// One attempt to load a file, kept for `ferry info`.
struct LoadRecord {
  std::string path;  // the file tried
  std::string name;  // the plugin's name when negotiation got that far
  bool loaded = false;
  bool filtered = false;  // LoadAll left it out: FERRY_TRANSPORTS (not a failure)
  std::string reason;     // why it was refused or left out (empty when loaded)
  std::string warning;    // loaded, with a warning (its file is named for another name)
};

struct LoaderOptions {
  std::vector<std::string> search_path;  // searched in this order
  std::string filter;                    // FERRY_TRANSPORTS syntax
  // The ABI window the host offers (tests narrow it to probe negotiation).
  uint32_t abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  uint32_t abi_minor_min = 1;  // 0.1 is the first published minor
  uint32_t abi_minor_max = FERRY_TRANSPORT_ABI_MINOR;
  bool unload_on_release = false;  // dlclose when the last Plugin ref goes

  // Search path and filter from FERRY_PLUGIN_PATH, FERRY_TRANSPORTS and the
  // built-in directories above.
  static LoaderOptions FromEnvironment();
};

class PluginLoader {
 public:
  explicit PluginLoader(LoaderOptions options = LoaderOptions::FromEnvironment());

  // Loads a plugin by name ("tcp") or path ("./libferry-foo.so"). A name not
  // found gives NOT_FOUND listing the paths tried, the plugins available and
  // the closest name. A second Load of the same file returns the same Plugin.
  StatusOr<std::shared_ptr<const Plugin>> Load(const std::string& name_or_path);

  // Loads every libferry-*.so on the search path that the filter admits (the
  // first file of each name wins, like PATH). Failures go to records().
  std::vector<std::shared_ptr<const Plugin>> LoadAll();

  // Every attempt so far, in order.
  const std::vector<LoadRecord>& records() const { return records_; }
  const LoaderOptions& options() const { return options_; }

  // True when `name` passes the FERRY_TRANSPORTS-style filter.
  static bool FilterAdmits(const std::string& filter, const std::string& name);
  // "libferry-tcp.so" -> "tcp"; "" when the file name is not a plugin's.
  static std::string NameFromFileName(const std::string& file_name);

 private:
  StatusOr<std::shared_ptr<const Plugin>> LoadFile(const std::string& path);
  std::vector<std::string> AvailableNames() const;

  LoaderOptions options_;
  std::vector<LoadRecord> records_;
  std::vector<std::shared_ptr<const Plugin>> loaded_;
};

}  // namespace ferry
