// ferry_shm::Status: a transport.h status code plus the message that tells the
// user what happened. Internal functions return it; the entry points copy it
// into the caller's error buffer, and connections turn it into event messages.
#pragma once

#include <ferry/transport.h>

#include <string>
#include <utility>

namespace ferry_shm {

struct Status {
  ferry_status_t code = FERRY_OK;
  std::string message;  // non-empty whenever code != FERRY_OK

  Status() = default;
  Status(ferry_status_t c, std::string m) : code(c), message(std::move(m)) {}
  bool ok() const { return code == FERRY_OK; }
};

// printf into a std::string (error and setup paths only).
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Error(FERRY_INVALID_ARGUMENT, "shm: ...", ...).
Status Error(ferry_status_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Error from errno: "<what>: <strerror(err)>".
Status ErrnoError(ferry_status_t code, int err, const std::string& what);

}  // namespace ferry_shm
