// ferry_cuda_ipc::Status and its helpers: the shared plugin status type
// (plugins/common/ferry_plugin/status.h) under this plugin's namespace.
#pragma once

#include "ferry_plugin/status.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace ferry_cuda_ipc {

using ferry_plugin::Error;
using ferry_plugin::Format;
using ferry_plugin::Report;
using ferry_plugin::Status;

// "what: strerror(err)".
inline std::string ErrnoText(int err, const std::string& what) {
  char buf[128];
  // GNU strerror_r returns the message (maybe not in buf).
  const char* text = strerror_r(err, buf, sizeof buf);
  return what + ": " + text;
}

}  // namespace ferry_cuda_ipc
