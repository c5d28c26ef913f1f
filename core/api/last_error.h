// The calling thread's last error, which ferry_last_error() returns, and the
// helpers every C entry point of libferry sets it with. Shared by the files
// of core/api/ so that each reports errors the same way.
#pragma once

#include <ferry/ferry.h>

#include "common/status.h"

#include <exception>
#include <string>

namespace ferry::api {

inline thread_local std::string last_error;

inline ferry_status_t Fail(const Status& s) {
  last_error = s.message();
  return s.code();
}
inline ferry_status_t Fail(ferry_status_t code, const std::string& message) {
  last_error = message;
  return code;
}
inline ferry_status_t Ok() {
  last_error.clear();
  return FERRY_OK;
}

}  // namespace ferry::api

// Wraps an entry point's body: no C++ exception crosses the C boundary.
#define FERRY_API_GUARD(...)                                               \
  try {                                                                    \
    __VA_ARGS__                                                            \
  } catch (const std::exception& e) {                                      \
    return ::ferry::api::Fail(FERRY_INTERNAL,                              \
                              std::string("internal error: ") + e.what()); \
  }
