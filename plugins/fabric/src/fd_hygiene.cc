#include "fd_hygiene.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ferry_fabric {
namespace {

bool IsLibfabricKind(int fd) {
  char path[64];
  char target[128];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strncmp(target, "socket:", 7) == 0 ||
         std::strncmp(target, "anon_inode:", 11) == 0;
}

}  // namespace

std::vector<FdSweeper::FdId> FdSweeper::OpenFds() {
  std::vector<FdId> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = std::atoi(e->d_name);
    struct stat st;
    if (fd != own && fstat(fd, &st) == 0) fds.emplace_back(fd, st.st_dev, st.st_ino);
  }
  closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

void FdSweeper::Baseline() {
  known_ = OpenFds();
}

void FdSweeper::Sweep() {
  std::vector<FdId> now = OpenFds();
  for (const FdId& id : now) {
    if (std::binary_search(known_.begin(), known_.end(), id)) continue;
    const int fd = std::get<0>(id);
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC) != 0) continue;
    if (IsLibfabricKind(fd)) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  known_ = std::move(now);
}

}  // namespace ferry_fabric
