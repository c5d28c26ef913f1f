#include "inner.h"

#include "ferry_plugin/host.h"
#include "ferry_plugin/log.h"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

// chaos's own entry point (entry.cc): an inner file that resolves to it is
// chaos itself.
extern "C" FERRY_TRANSPORT_EXPORT ferry_status_t
ferry_transport_negotiate(ferry_negotiate_args_t* args);

namespace ferry_chaos {
namespace {

constexpr uint32_t kMinorMin = 1;
constexpr uint32_t kMinorMax = FERRY_TRANSPORT_ABI_MINOR;

struct Cache {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<InnerPlugin>> by_path;
};

Cache& TheCache() {
  static Cache* cache = new Cache();  // never destroyed: plugins stay loaded
  return *cache;
}

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (char ch : name) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) {
      return false;
    }
  }
  return true;
}

// The directory libferry-chaos.so was loaded from.
std::string OwnDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ferry_transport_negotiate), &info) == 0 ||
      info.dli_fname == nullptr) {
    return ".";
  }
  std::string file = info.dli_fname;
  size_t slash = file.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : file.substr(0, slash);
}

// "tcp, shm" : the plugins in `dir` other than chaos, for error messages.
std::string PluginsIn(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string f = e->d_name;
      const std::string pre = "libferry-", post = ".so";
      if (f.size() > pre.size() + post.size() && f.compare(0, pre.size(), pre) == 0 &&
          f.compare(f.size() - post.size(), post.size(), post) == 0) {
        std::string n = f.substr(pre.size(), f.size() - pre.size() - post.size());
        if (n != kPluginName) names.push_back(n);
      }
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

const char* const kRequired[] = {
    "init",           "fini",    "query", "progress", "listen",  "listener_address",
    "close_listener", "connect", "send",  "place",    "discard", "close"};
const size_t kRequiredOffsets[] = {
    CHAOS_VT(init),           CHAOS_VT(fini),    CHAOS_VT(query),
    CHAOS_VT(progress),       CHAOS_VT(listen),  CHAOS_VT(listener_address),
    CHAOS_VT(close_listener), CHAOS_VT(connect), CHAOS_VT(send),
    CHAOS_VT(place),          CHAOS_VT(discard), CHAOS_VT(close)};

Status Negotiate(const std::string& path, const std::string& wanted,
                 std::unique_ptr<InnerPlugin>* out) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Error(FERRY_FAILED_PRECONDITION,
                 "chaos: cannot load the inner transport '%s' from %s: %s",
                 wanted.c_str(), path.c_str(), why ? why : "dlopen failed");
  }
  // Never dlclose()d: a plugin that was negotiated stays loaded (ABI rule),
  // and a refused file is only a refcount on a library nobody runs.
  void* sym = dlsym(handle, FERRY_TRANSPORT_ENTRY_SYMBOL);
  if (sym == nullptr) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "chaos: %s exports no %s: it is not a ferry transport plugin",
                 path.c_str(), FERRY_TRANSPORT_ENTRY_SYMBOL);
  }
  auto entry = reinterpret_cast<ferry_transport_negotiate_fn>(sym);
  if (entry == &ferry_transport_negotiate) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "chaos: the inner transport %s is chaos itself; set "
                 "FERRY_CHAOS_INNER to a real transport (tcp, shm, ...)",
                 path.c_str());
  }
  char msg[512] = {0};
  ferry_error_buf_t err{};
  err.struct_size = FERRY_ERROR_BUF_STRUCT_SIZE;
  err.data = msg;
  err.capacity = sizeof msg;
  ferry_negotiate_args_t na{};
  na.struct_size = FERRY_NEGOTIATE_ARGS_STRUCT_SIZE;
  na.abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  na.abi_minor_min = kMinorMin;
  na.abi_minor_max = kMinorMax;
  na.host = ferry_plugin::HostServices();  // the host's own table, passed along
  na.err = &err;
  ferry_status_t st = FERRY_INTERNAL;
  try {
    st = entry(&na);
  } catch (...) {
    return Error(FERRY_INTERNAL,
                 "chaos: the negotiation function of %s threw a C++ exception",
                 path.c_str());
  }
  if (st != FERRY_OK) {
    return Error(
        st == FERRY_INCOMPATIBLE ? FERRY_INCOMPATIBLE : FERRY_FAILED_PRECONDITION,
        "chaos: the inner transport %s refused ABI %u.%u-%u.%u "
        "(it supports %u.%u-%u.%u): %s",
        path.c_str(), FERRY_TRANSPORT_ABI_MAJOR, kMinorMin, FERRY_TRANSPORT_ABI_MAJOR,
        kMinorMax, na.plugin_abi_major, na.plugin_minor_min, na.plugin_abi_major,
        na.plugin_minor_max, msg[0] ? msg : "no reason given");
  }
  if (na.vtable == nullptr || na.chosen_minor < kMinorMin ||
      na.chosen_minor > kMinorMax || na.name == nullptr) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "chaos: the inner transport %s answered the negotiation "
                 "without a vtable or name, or with minor %u outside %u..%u",
                 path.c_str(), na.chosen_minor, kMinorMin, kMinorMax);
  }
  auto p = std::make_unique<InnerPlugin>();
  p->path = path;
  p->name = na.name;
  p->version = na.version ? na.version : "";
  p->minor = na.chosen_minor;
  p->features = na.features;
  p->vt = na.vtable;
  if (p->name == kPluginName) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "chaos: the inner transport %s is chaos itself; set "
                 "FERRY_CHAOS_INNER to a real transport (tcp, shm, ...)",
                 path.c_str());
  }
  std::string missing;
  for (size_t i = 0; i < sizeof kRequiredOffsets / sizeof kRequiredOffsets[0]; ++i) {
    if (!p->Has(kRequiredOffsets[i]))
      missing += std::string(missing.empty() ? "" : ", ") + kRequired[i];
  }
  if (!missing.empty()) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "chaos: the inner transport %s lacks required vtable entries: %s",
                 path.c_str(), missing.c_str());
  }
  *out = std::move(p);
  return Status();
}

}  // namespace

bool InnerPlugin::Has(size_t offset) const {
  if (vt == nullptr || offset + sizeof(void (*)()) > vt->struct_size) return false;
  void (*fn)() = nullptr;
  std::memcpy(&fn, reinterpret_cast<const char*>(vt) + offset, sizeof fn);
  return fn != nullptr;
}

Status LoadInner(const std::string& inner, const InnerPlugin** out) {
  std::string path;
  if (inner.find('/') != std::string::npos) {
    path = inner;
  } else {
    if (inner == kPluginName) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "chaos: inner=chaos: chaos cannot wrap itself; set "
                   "FERRY_CHAOS_INNER to a real transport (tcp, shm, ...)");
    }
    if (!ValidName(inner)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "chaos: inner='%s' is neither a plugin name ([a-z0-9_]+, "
                   "e.g. tcp) nor a path to a libferry-*.so",
                   inner.c_str());
    }
    std::string dir = OwnDirectory();
    path = dir + "/libferry-" + inner + ".so";
    if (access(path.c_str(), F_OK) != 0) {
      return Error(FERRY_NOT_FOUND,
                   "chaos: inner transport '%s' not found: tried %s (chaos "
                   "looks next to its own file); plugins there: %s. Set "
                   "FERRY_CHAOS_INNER to one of them",
                   inner.c_str(), path.c_str(), PluginsIn(dir).c_str());
    }
  }
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.by_path.find(path);
  if (it == cache.by_path.end()) {
    std::unique_ptr<InnerPlugin> p;
    Status st = Negotiate(path, inner, &p);
    if (!st.ok()) return st;
    FERRY_PLUGIN_LOG(FERRY_LOG_INFO, "inner transport %s %s (ABI 0.%u) from %s",
                     p->name.c_str(), p->version.c_str(), p->minor, path.c_str());
    it = cache.by_path.emplace(path, std::move(p)).first;
  }
  *out = it->second.get();
  return Status();
}

}  // namespace ferry_chaos
