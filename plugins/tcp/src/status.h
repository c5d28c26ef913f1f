// ferry_tcp::Status and its helpers: the shared plugin status type
// (plugins/common/ferry_plugin/status.h) under this plugin's namespace.
#pragma once

#include <string>
#include <utility>

#include "ferry_plugin/status.h"

namespace ferry_tcp {

using ferry_plugin::Error;
using ferry_plugin::Format;
using ferry_plugin::Status;

// The hot host calls (send, place, discard, progress) return a bare code and
// fill the caller's Status only when they fail, so their success path moves
// no std::string around: `return Report(error, Error(...));`.
inline ferry_status_t Report(Status* out, Status st) {
  const ferry_status_t code = st.code;
  *out = std::move(st);
  return code;
}

}  // namespace ferry_tcp
