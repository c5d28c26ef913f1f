#include "cma.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace ferry_shm {

bool CmaProbe(pid_t pid, uint64_t address, uint64_t expected, std::string* why) {
  if (pid <= 0) {
    *why = "the peer's pid is not visible in this pid namespace";
    return false;
  }
  uint64_t got = ~expected;
  int64_t n = CmaRead(pid, &got, address, sizeof got);
  if (n == static_cast<int64_t>(sizeof got) && got == expected) return true;
  if (n < 0) {
    *why =
        std::string("process_vm_readv: ") + std::strerror(static_cast<int>(-n)) +
        (n == -EPERM ? " (different user, or kernel.yama.ptrace_scope forbids it)" : "");
  } else {
    *why = "process_vm_readv read the wrong bytes";
  }
  return false;
}

int64_t CmaRead(pid_t pid, void* local, uint64_t remote, uint64_t len) {
  iovec l{local, static_cast<size_t>(len)};
  iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(remote)),
          static_cast<size_t>(len)};
  ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  return n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n);
}

}  // namespace ferry_shm
