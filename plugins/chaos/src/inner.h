// The wrapped ("inner") transport: libferry-<inner>.so from the directory
// chaos itself was loaded from, opened RTLD_NOW | RTLD_LOCAL and negotiated
// over chaos's own ABI window (chaos is the inner plugin's host). Loaded
// once per file and never unloaded, like the core's loader does.
#pragma once

#include "status.h"

#include <ferry/transport.h>

#include <cstddef>
#include <string>

namespace ferry_chaos {

// This plugin's name, which an inner transport must not have.
constexpr const char* kPluginName = "chaos";

struct InnerPlugin {
  std::string path;
  std::string name;
  std::string version;
  uint32_t minor = 0;
  uint64_t features = 0;
  const ferry_transport_vtable_t* vt = nullptr;

  // The vtable carries entry `offset` (inside struct_size and non-NULL).
  bool Has(size_t offset) const;
};

// `inner` is a plugin name ("tcp": found next to libferry-chaos.so) or a path
// (anything containing '/'). *out lives until the process exits.
Status LoadInner(const std::string& inner, const InnerPlugin** out);

}  // namespace ferry_chaos

#define CHAOS_VT(name) offsetof(ferry_transport_vtable_t, name)
