#include "harness/util.h"

#include "common/status.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

namespace ferry::conformance {

void FillCanary(void* p, size_t len) {
  std::memset(p, kCanary, len);
}

int64_t CanaryDamage(const void* p, size_t len) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < len; ++i) {
    if (b[i] != kCanary) return static_cast<int64_t>(i);
  }
  return -1;
}

GuardedBuffer::GuardedBuffer(size_t size) : size_(size) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t body = (size + page - 1) / page * page;
  map_len_ = body + page;
  map_ =
      mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) std::abort();
  auto* base = static_cast<unsigned char*>(map_);
  mprotect(base + body, page, PROT_NONE);
  data_ = base + body - size;
}

GuardedBuffer::~GuardedBuffer() {
  munmap(map_, map_len_);
}

std::set<int> OpenFds() {
  std::set<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    int fd = std::atoi(entry->d_name);
    if (fd != own) fds.insert(fd);
  }
  closedir(dir);
  return fds;
}

std::string Bytes(uint64_t n) {
  if (n >= kMiB && n % kMiB == 0) return std::to_string(n / kMiB) + " MiB";
  if (n >= kKiB && n % kKiB == 0) return std::to_string(n / kKiB) + " KiB";
  return std::to_string(n) + " B";
}

}  // namespace ferry::conformance
