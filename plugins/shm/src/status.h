// ferry_shm::Status and its helpers: the shared plugin status type
// (plugins/common/ferry_plugin/status.h) under this plugin's namespace.
#pragma once

#include "ferry_plugin/status.h"

#include <string>

namespace ferry_shm {

using ferry_plugin::Error;
using ferry_plugin::Format;
using ferry_plugin::Status;

// errno text appended to `what`: "what: strerror(err)".
Status ErrnoError(ferry_status_t code, int err, const std::string& what);

}  // namespace ferry_shm
