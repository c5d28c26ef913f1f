#include "address.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <fstream>

namespace ferry_cuda_ipc {

Status ParseAddress(const std::string& address, UnixAddress* out) {
  std::string name = address;
  if (name.compare(0, 5, "unix:") == 0) name = name.substr(5);
  const bool abstract = !name.empty() && name[0] == '@';
  const bool path = !name.empty() && name[0] == '/';
  const size_t max = sizeof(out->sa.sun_path) - 1;
  bool printable = true;
  for (unsigned char ch : name) printable = printable && ch > 0x20 && ch < 0x7f;
  if ((!abstract && !path) || name.size() < 2 || name.size() > max || !printable) {
    std::string shown;
    for (unsigned char ch : address.substr(0, 64)) {
      shown += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '?';
    }
    return Error(FERRY_INVALID_ARGUMENT,
                 "cuda_ipc: '%s' is not a cuda_ipc address (\"unix:@name\" for the "
                 "abstract namespace or \"unix:/path\", at most %zu characters)",
                 shown.c_str(), max);
  }
  UnixAddress a;
  a.sa.sun_family = AF_UNIX;
  a.abstract = abstract;
  // Abstract names: a leading NUL, and the length says where the name ends
  // (no padding NULs, so both sides name exactly the same socket).
  std::memcpy(a.sa.sun_path, name.data(), name.size());
  if (abstract) a.sa.sun_path[0] = '\0';
  if (path) a.path = name;
  a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() +
                                 (abstract ? 0 : 1));
  a.text = "unix:" + name;
  *out = a;
  return Status();
}

std::string NewListenName() {
  static std::atomic<unsigned> next{0};
  return Format("unix:@ferry-cuda-ipc-%d-%u", static_cast<int>(getpid()), next++);
}

std::string LocalDomain() {
  std::string boot = "unknown";
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  if (f) std::getline(f, boot);
  struct stat st {};
  unsigned long long ipc = 0, net = 0;
  if (stat("/proc/self/ns/ipc", &st) == 0) ipc = st.st_ino;
  if (stat("/proc/self/ns/net", &st) == 0) net = st.st_ino;
  return Format("host=%s;ipc=%llu;net=%llu", boot.c_str(), ipc, net);
}

}  // namespace ferry_cuda_ipc
