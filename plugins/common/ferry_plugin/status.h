// ferry_plugin::Status: a transport.h status code plus the message that tells
// the user what happened, shared by ferry's in-tree plugins. Internal plugin
// functions return it; entry points turn it into the caller's error buffer
// and connections into event messages. Depends on transport.h only: plugins
// never see the core's types.
#pragma once

#include <ferry/transport.h>

#include <string>
#include <utility>

namespace ferry_plugin {

struct Status {
  ferry_status_t code = FERRY_OK;
  std::string message;  // non-empty whenever code != FERRY_OK

  Status() = default;
  Status(ferry_status_t c, std::string m) : code(c), message(std::move(m)) {}
  bool ok() const { return code == FERRY_OK; }
};

// For the hot host calls (send, place, discard, progress), which return a
// bare code and fill the caller's Status only when they fail: the code of
// `st`, moved into *out only when it is an error, so a successful call moves
// no std::string. `return Report(error, Error(...));`, or with a callee's
// Status, `return Report(error, std::move(st));`.
inline ferry_status_t Report(Status* out, Status&& st) {
  const ferry_status_t code = st.code;
  if (code != FERRY_OK) *out = std::move(st);
  return code;
}

// printf into a std::string (used on error and set-up paths only).
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Error(FERRY_INVALID_ARGUMENT, "tcp: ...", ...). An empty message becomes
// "operation failed", so a failing status never travels without text.
Status Error(ferry_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

}  // namespace ferry_plugin
