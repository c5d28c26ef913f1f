// A plugin's parameters, read through the host (get_param: the in-process
// setting, else FERRY_<PLUGIN>_<KEY>), under the name SetPluginName() set.
#pragma once

#include <cstdint>
#include <string>

namespace ferry_plugin {

enum class ParamText { kUnset, kSet, kTooLong };

// The text of parameter `key`. kTooLong: longer than 1023 bytes, and *out
// holds the first 1023 (the caller decides: ignore it, or let its parse
// complain).
ParamText GetParamText(const char* key, std::string* out);

// The text of `key`, or `fallback` when unset or too long (logged).
std::string StringParam(const char* key, const std::string& fallback);

// Integer parameter `key`, clamped to [lo, hi]; a value outside is logged
// with the environment variable's name, so the user can fix it.
uint64_t IntParam(const char* key, uint64_t fallback, uint64_t lo, uint64_t hi);

// "FERRY_<PLUGIN>_<KEY>", upper case: for messages about a parameter.
std::string ParamEnvName(const char* key);

}  // namespace ferry_plugin
