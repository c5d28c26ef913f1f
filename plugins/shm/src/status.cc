#include "status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace ferry_shm {
namespace {

std::string VFormat(const char* fmt, va_list ap) {
  char small[256];
  va_list copy;
  va_copy(copy, ap);
  int n = std::vsnprintf(small, sizeof small, fmt, copy);
  va_end(copy);
  if (n < 0) return fmt;
  if (static_cast<size_t>(n) < sizeof small) return std::string(small, n);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(&out[0], out.size(), fmt, ap);
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

std::string Format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = VFormat(fmt, ap);
  va_end(ap);
  return s;
}

Status Error(ferry_status_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = VFormat(fmt, ap);
  va_end(ap);
  return Status(code, s.empty() ? "shm: unknown error" : s);
}

Status ErrnoError(ferry_status_t code, int err, const std::string& what) {
  char buf[128];
  // GNU strerror_r returns the message (maybe not in buf).
  const char* text = strerror_r(err, buf, sizeof buf);
  return Status(code, what + ": " + text);
}

}  // namespace ferry_shm
