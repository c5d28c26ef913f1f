#include "socket_util.h"

#include "log.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ferry_tcp {

int OpenStreamSocket(int family, Status* err) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    *err = Error(StatusForSetupErrno(e), "tcp: cannot create a %s socket: %s",
                 family == AF_INET6 ? "IPv6" : "IPv4", ErrnoText(e).c_str());
  }
  return fd;
}

void ConfigureStreamSocket(int fd, const Config& config) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    TCP_LOG(FERRY_LOG_WARN, "TCP_NODELAY failed: %s",
            ErrnoText(errno).c_str());
  }
  if (config.socket_buffer_size != 0) {
    int size = static_cast<int>(config.socket_buffer_size);
    // Setting a size turns the kernel's autotuning off, so only on request.
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
#ifdef SO_BUSY_POLL
  if (config.busy_poll && config.busy_poll_usec != 0) {
    int usec = static_cast<int>(config.busy_poll_usec);
    // Needs CAP_NET_ADMIN above net.core.busy_read and only helps NICs with
    // NAPI busy polling: best effort, never an error.
    if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &usec, sizeof usec) != 0) {
      TCP_LOG(FERRY_LOG_DEBUG, "SO_BUSY_POLL=%d not applied: %s", usec,
              ErrnoText(errno).c_str());
    }
  }
#endif
}

int TakeSocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

std::string ErrnoText(int err) {
  char buf[128];
  // The GNU strerror_r returns the message pointer (maybe not buf).
  const char* msg = strerror_r(err, buf, sizeof buf);
  return Format("%s (errno %d)", msg, err);
}

ferry_status_t StatusForIoErrno(int err) {
  switch (err) {
    case ENOMEM:
    case ENOBUFS:
      return FERRY_RESOURCE_EXHAUSTED;
    case EFAULT:  // a buffer the host gave us is not mapped
      return FERRY_INVALID_ARGUMENT;
    default:
      return FERRY_PEER_GONE;
  }
}

ferry_status_t StatusForConnectErrno(int err) {
  switch (err) {
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOBUFS:
      return FERRY_RESOURCE_EXHAUSTED;
    case EACCES:
    case EPERM:
      return FERRY_PERMISSION_DENIED;
    default:  // refused, timed out, unreachable, reset...
      return FERRY_UNAVAILABLE;
  }
}

ferry_status_t StatusForSetupErrno(int err) {
  switch (err) {
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOBUFS:
      return FERRY_RESOURCE_EXHAUSTED;
    case EACCES:
    case EPERM:
      return FERRY_PERMISSION_DENIED;
    case EADDRINUSE:
      return FERRY_ALREADY_EXISTS;
    case EADDRNOTAVAIL:
    case EINVAL:
      return FERRY_INVALID_ARGUMENT;
    case EAFNOSUPPORT:
      return FERRY_UNAVAILABLE;
    default:
      return FERRY_INTERNAL;
  }
}

void CloseFd(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace ferry_tcp
