#include "setup_socket.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ferry_shm {
namespace {

std::atomic<uint64_t> g_socket_counter{0};

// `pid` no longer runs: no such process, or a zombie waiting to be reaped.
bool ProcessGone(long pid) {
  if (kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[256];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  return close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] == 'Z';
}

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr->sun_path) return false;
  std::memcpy(addr->sun_path, path.data(), path.size());
  return true;
}

int NewSocket() {
  return socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

// Nobody listens at `path` (a socket file whose listener is gone).
bool IsStale(const std::string& path) {
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) return false;
  int fd = NewSocket();
  if (fd < 0) return false;
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  close(fd);
  return rc != 0 && err == ECONNREFUSED;
}

Status CheckPrivate(const std::string& dir) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: socket directory " + dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Error(FERRY_PERMISSION_DENIED,
                 "shm: socket directory %s is not a directory (a symlink?): "
                 "remove it or set FERRY_SHM_SOCKET_DIR",
                 dir.c_str());
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return Error(FERRY_PERMISSION_DENIED,
                 "shm: socket directory %s must be owned by uid %u with mode "
                 "0700 (it has owner %u, mode %03o): fix or remove it, or set "
                 "FERRY_SHM_SOCKET_DIR",
                 dir.c_str(), static_cast<unsigned>(geteuid()),
                 static_cast<unsigned>(st.st_uid),
                 static_cast<unsigned>(st.st_mode & 0777));
  }
  return Status();
}

Status ConnectError(int err, const std::string& path) {
  switch (err) {
    case ENOENT:
      return Error(FERRY_UNAVAILABLE, "shm: nothing listens at %s (no such socket file)",
                   path.c_str());
    case ECONNREFUSED:
      return Error(FERRY_UNAVAILABLE,
                   "shm: connection refused at %s (its listener is gone)", path.c_str());
    case EACCES:
    case EPERM:
      return Error(FERRY_PERMISSION_DENIED,
                   "shm: no permission to connect to %s (another user's "
                   "socket or directory)",
                   path.c_str());
    default:
      return ErrnoError(FERRY_UNAVAILABLE, err, "shm: connect to " + path);
  }
}

}  // namespace

Status PrivateSocketDir(const std::string& configured, std::string* dir) {
  std::string d = configured;
  if (d.empty()) {
    const char* xdg = std::getenv("XDG_RUNTIME_DIR");
    struct stat st {};
    if (xdg != nullptr && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == geteuid()) {
      d = std::string(xdg) + "/ferry-shm";
    } else {
      d = "/tmp/ferry-shm-" + std::to_string(geteuid());
    }
  }
  if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: creating socket directory " + d);
  }
  Status st = CheckPrivate(d);
  if (!st.ok()) return st;
  *dir = d;
  return Status();
}

std::string NewSocketPath(const std::string& dir) {
  uint32_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != sizeof rnd) rnd = 0;
  char name[64];
  std::snprintf(name, sizeof name, "/%d-%llu-%08x.sock", static_cast<int>(getpid()),
                static_cast<unsigned long long>(++g_socket_counter), rnd);
  return dir + name;
}

void SweepStaleSockets(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const char* name = e->d_name;
    char* end = nullptr;
    long pid = std::strtol(name, &end, 10);
    size_t n = std::strlen(name);
    if (end == name || *end != '-' || pid <= 0 || n < 5 ||
        std::strcmp(name + n - 5, ".sock") != 0) {
      continue;
    }
    if (!ProcessGone(pid)) continue;
    std::string path = dir + "/" + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) ||
        st.st_uid != geteuid()) {
      continue;
    }
    // The pid may belong to another pid namespace: only a refused connect
    // proves that nobody listens.
    if (IsStale(path)) unlink(path.c_str());
  }
  closedir(d);
}

Status CheckSocketPath(const std::string& path) {
  sockaddr_un addr;
  if (path.empty() || path[0] != '/') {
    return Error(FERRY_INVALID_ARGUMENT,
                 "shm: address '%s' is not an absolute socket path (listen "
                 "with \"\" to get one)",
                 path.c_str());
  }
  if (!FillAddress(path, &addr)) {
    return Error(FERRY_INVALID_ARGUMENT, "shm: socket path '%s' is longer than %zu bytes",
                 path.c_str(), sizeof addr.sun_path - 1);
  }
  return Status();
}

Status ListenAt(const std::string& path, int* out) {
  Status st = CheckSocketPath(path);
  if (!st.ok()) return st;
  sockaddr_un addr;
  FillAddress(path, &addr);
  int fd = NewSocket();
  if (fd < 0) return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: socket");
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc != 0 && errno == EADDRINUSE && IsStale(path)) {
    unlink(path.c_str());
    rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  if (rc != 0) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE) {
      return Error(FERRY_ALREADY_EXISTS, "shm: %s is in use by a live listener",
                   path.c_str());
    }
    return ErrnoError(e == EACCES ? FERRY_PERMISSION_DENIED : FERRY_UNAVAILABLE, e,
                      "shm: bind " + path);
  }
  // The directory already keeps others out; 0600 says so on the file too.
  if (chmod(path.c_str(), 0600) != 0 || listen(fd, 128) != 0) {
    int e = errno;
    close(fd);
    unlink(path.c_str());
    return ErrnoError(FERRY_UNAVAILABLE, e, "shm: listen at " + path);
  }
  *out = fd;
  return Status();
}

Status StartConnect(const std::string& path, int* out, bool* pending) {
  Status st = CheckSocketPath(path);
  if (!st.ok()) return st;
  int fd = NewSocket();
  if (fd < 0) return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: socket");
  st = RetryConnect(fd, path, pending);
  if (!st.ok()) {
    close(fd);
    return st;
  }
  *out = fd;
  return Status();
}

Status RetryConnect(int fd, const std::string& path, bool* pending) {
  sockaddr_un addr;
  FillAddress(path, &addr);
  *pending = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    return Status();
  }
  // A Unix socket connects at once or says EAGAIN (the backlog is full).
  if (errno == EAGAIN || errno == EINPROGRESS) {
    *pending = true;
    return Status();
  }
  if (errno == EISCONN) return Status();
  return ConnectError(errno, path);
}

Status SendWithFds(int fd, const void* buf, size_t len, const int* fds, int nfds,
                   bool* again) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  *again = false;
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(len)) return Status();
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    *again = true;
    return Status();
  }
  if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
    return Error(FERRY_PEER_GONE, "shm: the peer closed the connection during set-up");
  }
  return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: sendmsg on the set-up socket");
}

Status RecvWithFds(int fd, void* buf, size_t cap, size_t* len, int* fds, int max_fds,
                   int* nfds, RecvResult* result) {
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  *nfds = 0;
  ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      *result = RecvResult::kWouldBlock;
      return Status();
    }
    if (errno == ECONNRESET) {
      *result = RecvResult::kEof;
      return Status();
    }
    return ErrnoError(FERRY_UNAVAILABLE, errno, "shm: recvmsg on the set-up socket");
  }
  // Collect every fd first, so none leaks whatever happens next.
  int got = 0;
  int extra[8];
  int nextra = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (got < max_fds) {
        fds[got++] = f;
      } else if (nextra < 8) {
        extra[nextra++] = f;
      } else {
        close(f);
      }
    }
  }
  if (n == 0 && got == 0) {
    *result = RecvResult::kEof;
    return Status();
  }
  if (nextra > 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    for (int i = 0; i < nextra; ++i) close(extra[i]);
    for (int i = 0; i < got; ++i) close(fds[i]);
    return Error(FERRY_DATA_LOSS,
                 "shm: malformed set-up message (%zd bytes, too many fds or "
                 "truncated)",
                 n);
  }
  *nfds = got;
  *len = static_cast<size_t>(n);
  *result = RecvResult::kMessage;
  return Status();
}

Status PeerCredentials(int fd, ucred* out) {
  socklen_t len = sizeof *out;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, out, &len) != 0) {
    return ErrnoError(FERRY_INTERNAL, errno, "shm: SO_PEERCRED");
  }
  return Status();
}

bool SocketHungUp(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 &&
         (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ferry_shm
