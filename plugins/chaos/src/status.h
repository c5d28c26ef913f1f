// ferry_chaos::Status and its helpers: the shared plugin status type
// (plugins/common/ferry_plugin/status.h) under this plugin's namespace.
#pragma once

#include "ferry_plugin/status.h"

namespace ferry_chaos {

using ferry_plugin::Error;
using ferry_plugin::Format;
using ferry_plugin::Status;

}  // namespace ferry_chaos
