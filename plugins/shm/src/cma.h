// Cross-memory attach: process_vm_readv copies straight from the sender's
// buffer into the receiver's placed buffer, one copy and no staging. The
// kernel allows it only under ptrace access rules (same user, no Yama
// restriction, peer dumpable), so each side probes at set-up by reading a
// word the peer told it about; when the probe fails, segments go through
// the ring instead.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ferry_shm {

// True when `pid`'s word at `address` reads back as `expected`; else *why
// says what the kernel answered.
bool CmaProbe(pid_t pid, uint64_t address, uint64_t expected, std::string* why);

// Reads up to `len` bytes at `remote` in `pid` into `local`. Returns the
// bytes read (maybe fewer), or -errno (ESRCH: the process is gone; EFAULT:
// an address is not mapped; EPERM: no longer allowed).
int64_t CmaRead(pid_t pid, void* local, uint64_t remote, uint64_t len);

}  // namespace ferry_shm
