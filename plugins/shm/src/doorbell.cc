#include "doorbell.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace ferry_shm {
namespace {

// The kernel names an eventfd's file "anon_inode:[eventfd]".
bool IsEventFd(int fd) {
  char path[64], target[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n < 0) return false;
  target[n] = '\0';
  return std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

}  // namespace

Status Doorbell::Create() {
  own_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (own_fd_ < 0) return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: eventfd");
  return Status();
}

Status Doorbell::Attach(int peer_fd, OwnerLine* own, OwnerLine* peer,
                        bool peer_may_sleep) {
  if (!IsEventFd(peer_fd)) {
    close(peer_fd);
    return Error(FERRY_PERMISSION_DENIED,
                 "shm: the peer's doorbell is not an eventfd: refusing it");
  }
  peer_fd_ = peer_fd;
  own_ = own;
  peer_ = peer;
  peer_may_sleep_ = peer_may_sleep;
  return Status();
}

void Doorbell::Close() {
  if (own_fd_ >= 0) close(own_fd_);
  if (peer_fd_ >= 0) close(peer_fd_);
  own_fd_ = peer_fd_ = -1;
  own_ = peer_ = nullptr;
}

void Doorbell::Drain() {
  uint64_t v;
  while (read(own_fd_, &v, sizeof v) == static_cast<ssize_t>(sizeof v)) {
  }
}

void Doorbell::Ring() {
  const uint64_t one = 1;
  // Non-blocking eventfd: fails only if the counter would overflow, which
  // means it is already readable.
  (void)!write(peer_fd_, &one, sizeof one);
}

}  // namespace ferry_shm
