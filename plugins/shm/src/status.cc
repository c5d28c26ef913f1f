#include "status.h"

#include <cstring>

namespace ferry_shm {

Status ErrnoError(ferry_status_t code, int err, const std::string& what) {
  char buf[128];
  // GNU strerror_r returns the message (maybe not in buf).
  const char* text = strerror_r(err, buf, sizeof buf);
  return Status(code, what + ": " + text);
}

}  // namespace ferry_shm
