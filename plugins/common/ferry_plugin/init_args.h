// ReadInitArgs: the fields of init()'s arguments every plugin reads, read
// the way the ABI's struct_size rule says (a plugin built for a newer minor
// may get a host's smaller struct).
#pragma once

#include <ferry/transport.h>

#include <cstdint>

namespace ferry_plugin {

// What init() reads of its arguments. Both are optional: NULL args, or a
// field beyond the host's struct_size, read as 0 and NULL.
struct InitArgs {
  uint32_t flags = 0;              // FERRY_INIT_*
  const char* instance = nullptr;  // borrowed for the call only
};
inline InitArgs ReadInitArgs(const ferry_init_args_t* args) {
  InitArgs in;
  if (args == nullptr) return in;
  if (FERRY_FIELD_PRESENT(args, ferry_init_args_t, flags)) in.flags = args->flags;
  if (FERRY_FIELD_PRESENT(args, ferry_init_args_t, instance))
    in.instance = args->instance;
  return in;
}

}  // namespace ferry_plugin
