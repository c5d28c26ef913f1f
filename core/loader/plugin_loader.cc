#include "loader/plugin_loader.h"

#include "common/log.h"
#include "loader/host_services.h"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace ferry {
namespace fs = std::filesystem;

struct Plugin::Library {
  boost::dll::shared_library lib;
};

namespace {

constexpr const char kPrefix[] = "libferry-";
constexpr const char kSuffix[] = ".so";

// Libraries whose negotiation succeeded stay mapped until the process exits:
// plugin code may still run in threads it started, and unloading a library
// whose function pointers the core kept is the classic use-after-unmap
// crash. This vector is never destroyed on purpose (a static destructor
// would dlclose at exit while plugin threads may still run).
std::vector<boost::dll::shared_library>& PinnedLibraries() {
  static auto* pinned = new std::vector<boost::dll::shared_library>();
  return *pinned;
}

std::vector<std::string> SplitList(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

// The directory of the binary that holds the ferry core (an executable, or
// a shared library such as the Python module), found from a symbol in it.
fs::path CoreBinaryDir() {
  boost::dll::fs::error_code ec;
  fs::path where = boost::dll::symbol_location_ptr(
      reinterpret_cast<const void*>(&PinnedLibraries), ec);
  if (ec || where.empty() || !where.has_parent_path()) {
    // dladdr reports a bare argv[0] for a program started from PATH: ask
    // for the executable's real location instead.
    ec.clear();
    where = boost::dll::program_location(ec);
    if (ec || where.empty()) return {};
  }
  return where.parent_path();
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool LooksLikePath(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 3 && s.compare(s.size() - 3, 3, kSuffix) == 0);
}

const char* kRequiredEntries[] = {
    "init",           "fini",    "query", "progress", "listen",  "listener_address",
    "close_listener", "connect", "send",  "place",    "discard", "close"};

// Offsets of the required entries, in the order of kRequiredEntries.
const size_t kRequiredOffsets[] = {offsetof(ferry_transport_vtable_t, init),
                                   offsetof(ferry_transport_vtable_t, fini),
                                   offsetof(ferry_transport_vtable_t, query),
                                   offsetof(ferry_transport_vtable_t, progress),
                                   offsetof(ferry_transport_vtable_t, listen),
                                   offsetof(ferry_transport_vtable_t, listener_address),
                                   offsetof(ferry_transport_vtable_t, close_listener),
                                   offsetof(ferry_transport_vtable_t, connect),
                                   offsetof(ferry_transport_vtable_t, send),
                                   offsetof(ferry_transport_vtable_t, place),
                                   offsetof(ferry_transport_vtable_t, discard),
                                   offsetof(ferry_transport_vtable_t, close)};

// Names of required entries the vtable lacks (outside struct_size or NULL).
std::vector<std::string> MissingRequiredEntries(const ferry_transport_vtable_t* vt) {
  std::vector<std::string> missing;
  for (size_t i = 0; i < sizeof(kRequiredOffsets) / sizeof(size_t); ++i) {
    size_t off = kRequiredOffsets[i];
    bool present = off + sizeof(void*) <= vt->struct_size;
    if (present) {
      void* fn = nullptr;
      std::memcpy(&fn, reinterpret_cast<const char*>(vt) + off, sizeof fn);
      present = fn != nullptr;
    }
    if (!present) missing.push_back(kRequiredEntries[i]);
  }
  return missing;
}

}  // namespace

Plugin::~Plugin() = default;

LoaderOptions LoaderOptions::FromEnvironment() {
  LoaderOptions options;
  if (const char* env = std::getenv("FERRY_PLUGIN_PATH")) {
    options.search_path = SplitList(env, ':');
  }
  fs::path core_dir = CoreBinaryDir();
  if (!core_dir.empty()) {
    options.search_path.push_back(
        (core_dir / ".." / "lib" / "ferry" / "plugins").lexically_normal());
    options.search_path.push_back((core_dir / "ferry" / "plugins").lexically_normal());
  }
#ifdef FERRY_PLUGIN_INSTALL_DIR
  options.search_path.push_back(FERRY_PLUGIN_INSTALL_DIR);
#endif
  // Drop duplicates, keeping the first (highest priority) occurrence.
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (const std::string& dir : options.search_path) {
    if (seen.insert(dir).second) unique.push_back(dir);
  }
  options.search_path = std::move(unique);
  if (const char* env = std::getenv("FERRY_TRANSPORTS")) options.filter = env;
  return options;
}

PluginLoader::PluginLoader(LoaderOptions options) : options_(std::move(options)) {}

bool PluginLoader::FilterAdmits(const std::string& filter, const std::string& name) {
  if (filter.empty()) return true;
  bool exclude = filter[0] == '^';
  std::vector<std::string> names = SplitList(exclude ? filter.substr(1) : filter, ',');
  bool listed = std::find(names.begin(), names.end(), name) != names.end();
  return exclude ? !listed : listed;
}

std::string PluginLoader::NameFromFileName(const std::string& file_name) {
  const size_t prefix = sizeof(kPrefix) - 1, suffix = sizeof(kSuffix) - 1;
  if (file_name.size() <= prefix + suffix) return "";
  if (file_name.compare(0, prefix, kPrefix) != 0) return "";
  if (file_name.compare(file_name.size() - suffix, suffix, kSuffix) != 0) return "";
  return file_name.substr(prefix, file_name.size() - prefix - suffix);
}

std::vector<std::string> PluginLoader::AvailableNames() const {
  std::set<std::string> names;
  for (const std::string& dir : options_.search_path) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::string name = NameFromFileName(entry.path().filename().string());
      if (!name.empty() && FilterAdmits(options_.filter, name)) names.insert(name);
    }
  }
  return {names.begin(), names.end()};
}

StatusOr<std::shared_ptr<const Plugin>> PluginLoader::Load(
    const std::string& name_or_path) {
  if (name_or_path.empty()) {
    return Status(FERRY_INVALID_ARGUMENT,
                  "empty transport name: give a plugin name such as 'tcp' or "
                  "a path such as ./libferry-foo.so");
  }
  if (LooksLikePath(name_or_path)) return LoadFile(name_or_path);

  const std::string& name = name_or_path;
  if (!FilterAdmits(options_.filter, name)) {
    return Status(FERRY_NOT_FOUND,
                  "transport '" + name + "' is excluded by FERRY_TRANSPORTS=" +
                      options_.filter + ": change or unset FERRY_TRANSPORTS to use it");
  }
  std::vector<std::string> tried;
  for (const std::string& dir : options_.search_path) {
    fs::path candidate = fs::path(dir) / (kPrefix + name + kSuffix);
    tried.push_back(candidate.string());
    std::error_code ec;
    if (fs::exists(candidate, ec)) return LoadFile(candidate.string());
  }

  std::vector<std::string> available = AvailableNames();
  std::string closest;
  size_t best = std::string::npos;
  for (const std::string& candidate : available) {
    size_t d = EditDistance(name, candidate);
    if (d < best) best = d, closest = candidate;
  }
  std::string message =
      "no transport plugin named '" + name + "'. Tried: " +
      (tried.empty() ? std::string("(no search directories)") : Join(tried, ", ")) +
      ". Available: " +
      (available.empty() ? std::string("none") : Join(available, ", ")) + ".";
  if (!closest.empty() && best <= std::max<size_t>(2, name.size() / 2)) {
    message += " Did you mean '" + closest + "'?";
  }
  message += " Add the plugin's directory to FERRY_PLUGIN_PATH, or pass its path.";
  return Status(FERRY_NOT_FOUND, message);
}

namespace {

// Why a plugin is refused: the status the caller gets and the reason.
struct Refusal {
  ferry_status_t code;
  std::string why;
};

// The dynamic loader's own words for why `path` does not load ("invalid ELF
// header", "libfoo.so.1: cannot open shared object file: No such file or
// directory"), without the path it repeats. Boost.DLL's exception text adds
// its own prefix and an errno that means nothing here.
std::string DlopenError(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) {  // it loads now: a race with the file changing
    dlclose(handle);
    return "it could not be loaded a moment ago";
  }
  const char* text = dlerror();
  std::string why = text != nullptr ? text : "no reason given";
  if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
  return why;
}

// A plugin's name is what users write in a transport list and what its
// file is named for (libferry-<name>.so): 1 to 32 of a-z, 0-9 and '_',
// starting with a letter.
bool ValidPluginName(const std::string& name) {
  if (name.empty() || name.size() > 32 || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// A name as it can be printed: control and non-ASCII bytes become '?'.
std::string Printable(const char* text) {
  std::string out;
  for (const char* c = text; *c != '\0' && out.size() < 64; ++c) {
    out += *c >= 0x20 && *c < 0x7f ? *c : '?';
  }
  return out;
}

// Calls a plugin's negotiation function. A C++ exception escaping it is a
// refusal (the ABI forbids it), not a crash of the host.
std::optional<Refusal> CallEntry(ferry_transport_negotiate_fn entry,
                                 ferry_negotiate_args_t* args, ferry_status_t* rc) {
  try {
    *rc = entry(args);
  } catch (const std::exception& e) {
    return Refusal{FERRY_INTERNAL,
                   std::string("its negotiation threw a C++ exception (") + e.what() +
                       "); plugins must not let exceptions escape"};
  } catch (...) {
    return Refusal{FERRY_INTERNAL,
                   "its negotiation threw a C++ exception; plugins must not let "
                   "exceptions escape"};
  }
  return std::nullopt;
}

// What is wrong with a plugin's answer to the negotiation, if anything:
// its own refusal (with the version windows when they do not overlap), no
// name, a minor outside the offer, no usable vtable, missing entries.
std::optional<Refusal> CheckAnswer(const LoaderOptions& options,
                                   const ferry_negotiate_args_t& args, ferry_status_t rc,
                                   const char* error_text) {
  const std::string who = args.name == nullptr || args.name[0] == '\0'
                              ? std::string("plugin")
                              : "plugin '" + std::string(args.name) + "'";
  if (rc != FERRY_OK) {
    std::ostringstream why;
    why << who << " refused ABI negotiation (" << StatusCodeName(rc)
        << "): " << (error_text[0] ? error_text : "no message given");
    if (rc == FERRY_INCOMPATIBLE) {
      why << ". The host offers " << options.abi_major << "." << options.abi_minor_min
          << "-" << options.abi_major << "." << options.abi_minor_max
          << "; the plugin supports " << args.plugin_abi_major << "."
          << args.plugin_minor_min << "-" << args.plugin_abi_major << "."
          << args.plugin_minor_max
          << ". Rebuild the plugin against this ferry's transport.h, or use a "
             "ferry whose ABI window includes the plugin's";
    }
    return Refusal{
        rc == FERRY_INCOMPATIBLE ? FERRY_INCOMPATIBLE : FERRY_FAILED_PRECONDITION,
        why.str()};
  }
  if (args.name == nullptr || args.name[0] == '\0') {
    return Refusal{FERRY_INVALID_ARGUMENT,
                   "its negotiation returned no name; fix the plugin to return "
                   "its name (ferry_plugin_negotiate does)"};
  }
  if (args.chosen_minor < options.abi_minor_min ||
      args.chosen_minor > options.abi_minor_max) {
    return Refusal{FERRY_INCOMPATIBLE,
                   who + " chose ABI minor " + std::to_string(args.chosen_minor) +
                       ", outside the host's offer " +
                       std::to_string(options.abi_minor_min) + "-" +
                       std::to_string(options.abi_minor_max) +
                       "; fix the plugin's negotiation to choose a minor inside "
                       "the offered range (ferry_plugin_negotiate does)"};
  }
  if (args.vtable == nullptr) {
    return Refusal{FERRY_INVALID_ARGUMENT,
                   who +
                       " returned a NULL vtable; fix the plugin to return its "
                       "static ferry_transport_vtable_t on success"};
  }
  if (args.vtable->struct_size < sizeof(uint32_t) * 2) {
    return Refusal{FERRY_INVALID_ARGUMENT,
                   who + " returned a vtable with struct_size " +
                       std::to_string(args.vtable->struct_size) +
                       "; set it to sizeof(ferry_transport_vtable_t)"};
  }
  std::vector<std::string> missing = MissingRequiredEntries(args.vtable);
  if (!missing.empty()) {
    return Refusal{FERRY_INVALID_ARGUMENT,
                   who + "'s vtable lacks required entries: " + Join(missing, ", ") +
                       " (NULL or beyond its struct_size " +
                       std::to_string(args.vtable->struct_size) +
                       "); implement them (see ferry/transport.h)"};
  }
  return std::nullopt;
}

}  // namespace

StatusOr<std::shared_ptr<const Plugin>> PluginLoader::LoadFile(
    const std::string& path_text) {
  std::error_code fs_ec;
  fs::path path = fs::absolute(path_text, fs_ec).lexically_normal();
  for (const auto& plugin : loaded_) {
    if (plugin->path() == path.string()) return plugin;
  }
  LoadRecord record;
  record.path = path.string();
  auto refuse = [&](ferry_status_t code, const std::string& why) {
    record.reason = why;
    records_.push_back(record);
    FERRY_LOG(FERRY_LOG_INFO, "loader", "refused " + record.path + ": " + why);
    return Status(code, "cannot load transport plugin " + record.path + ": " + why);
  };

  if (!fs::exists(path, fs_ec)) {
    return refuse(FERRY_NOT_FOUND, "no such file; check the path");
  }

  auto plugin = std::shared_ptr<Plugin>(new Plugin());
  plugin->library_ = std::make_unique<Plugin::Library>();
  try {
    plugin->library_->lib.load(path.string(), boost::dll::load_mode::rtld_now |
                                                  boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    (void)e;  // its text is Boost's; the loader's own reason is clearer
    return refuse(FERRY_INVALID_ARGUMENT,
                  "the dynamic loader refused it: " + DlopenError(path.string()) +
                      "; check that it is a shared library built for this machine and "
                      "that its dependencies are installed (ldd)");
  }
  boost::dll::shared_library& lib = plugin->library_->lib;
  if (!lib.has(FERRY_TRANSPORT_ENTRY_SYMBOL)) {
    return refuse(FERRY_INVALID_ARGUMENT,
                  "it does not export the entry symbol '" FERRY_TRANSPORT_ENTRY_SYMBOL
                  "'; a ferry transport plugin defines it with "
                  "FERRY_TRANSPORT_EXPORT (see docs/writing-a-plugin.md)");
  }
  auto entry = reinterpret_cast<ferry_transport_negotiate_fn>(
      lib.get<void()>(FERRY_TRANSPORT_ENTRY_SYMBOL));

  char error_text[1024] = {0};
  ferry_error_buf_t err{};
  err.struct_size = sizeof err;
  err.data = error_text;
  err.capacity = sizeof error_text;
  ferry_negotiate_args_t args{};
  args.struct_size = sizeof args;
  args.abi_major = options_.abi_major;
  args.abi_minor_min = options_.abi_minor_min;
  args.abi_minor_max = options_.abi_minor_max;
  args.host = HostServices();
  args.err = &err;
  ferry_status_t rc = FERRY_OK;
  if (auto refused = CallEntry(entry, &args, &rc)) {
    return refuse(refused->code, refused->why);
  }
  if (args.name != nullptr) record.name = args.name;
  if (auto refused = CheckAnswer(options_, args, rc, error_text)) {
    return refuse(refused->code, refused->why);
  }
  if (!ValidPluginName(args.name)) {
    return refuse(FERRY_INVALID_ARGUMENT,
                  "it declares the name '" + Printable(args.name) +
                      "', which is not a plugin name (1 to 32 of a-z, 0-9 and '_', "
                      "starting with a letter: what users write in a transport list "
                      "and what libferry-<name>.so is named for); fix the name the "
                      "plugin passes to ferry_plugin_negotiate");
  }
  const std::string file_name = NameFromFileName(path.filename().string());
  if (!file_name.empty() && file_name != args.name) {
    record.warning = "the file is named for '" + file_name +
                     "' but the plugin declares '" + args.name +
                     "': by name it is found as '" + file_name + "' and then called '" +
                     args.name + "'; rename the file to libferry-" + args.name + ".so";
    FERRY_LOG(FERRY_LOG_WARN, "loader", record.path + ": " + record.warning);
  }

  plugin->name_ = args.name;
  plugin->version_ = args.version != nullptr ? args.version : "";
  plugin->path_ = path.string();
  plugin->warning_ = record.warning;
  plugin->abi_major_ = options_.abi_major;
  plugin->abi_minor_ = args.chosen_minor;
  plugin->plugin_minor_min_ = args.plugin_minor_min;
  plugin->plugin_minor_max_ = args.plugin_minor_max;
  plugin->features_ = args.features;
  plugin->vtable_ = args.vtable;
  plugin->entry_ = entry;
  if (!options_.unload_on_release) PinnedLibraries().push_back(lib);

  record.loaded = true;
  records_.push_back(record);
  FERRY_LOG(FERRY_LOG_DEBUG, "loader",
            "loaded '" + plugin->name_ + "' " + plugin->version_ + " from " +
                plugin->path_ + " (ABI " + std::to_string(plugin->abi_major_) + "." +
                std::to_string(plugin->abi_minor_) + ")");
  loaded_.push_back(plugin);
  return std::shared_ptr<const Plugin>(plugin);
}

std::vector<std::shared_ptr<const Plugin>> PluginLoader::LoadAll() {
  std::vector<std::shared_ptr<const Plugin>> out;
  std::set<std::string> seen_names;
  for (const std::string& dir : options_.search_path) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      std::string name = NameFromFileName(file.filename().string());
      if (name.empty()) continue;
      if (!FilterAdmits(options_.filter, name)) {
        if (seen_names.insert(name).second) {
          LoadRecord filtered;
          filtered.path = fs::absolute(file, ec).lexically_normal().string();
          filtered.name = name;
          filtered.filtered = true;
          filtered.reason = "left out by FERRY_TRANSPORTS=" + options_.filter;
          records_.push_back(filtered);
        }
        continue;
      }
      if (!seen_names.insert(name).second) continue;  // shadowed, like PATH
      auto plugin = LoadFile(file.string());
      if (plugin.ok()) out.push_back(plugin.value());
    }
  }
  return out;
}

}  // namespace ferry
