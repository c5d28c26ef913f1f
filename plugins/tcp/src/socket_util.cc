#include "socket_util.h"

#include "ferry_plugin/log.h"

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
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "TCP_NODELAY failed: %s", ErrnoText(errno).c_str());
  }
#ifdef SO_BUSY_POLL
  if (config.busy_poll && config.busy_poll_usec != 0) {
    int usec = static_cast<int>(config.busy_poll_usec);
    // Needs CAP_NET_ADMIN above net.core.busy_read and only helps NICs with
    // NAPI busy polling: best effort, never an error.
    if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &usec, sizeof usec) != 0) {
      FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "SO_BUSY_POLL=%d not applied: %s", usec,
                       ErrnoText(errno).c_str());
    }
  }
#endif
}

bool PeerIsLocal(int fd, const SocketAddress& peer) {
  if (peer.family() == AF_INET) {
    const in_addr& a = reinterpret_cast<const sockaddr_in*>(&peer.storage)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) == 127) return true;  // 127.0.0.0/8
  } else if (peer.family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&peer.storage)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127) return true;
  } else {
    return false;
  }
  // Our own interface address (a connection to this host's external
  // address is routed over loopback too).
  SocketAddress local;
  if (!SocketName(fd, /*peer=*/false, &local).ok() || local.family() != peer.family()) {
    return false;
  }
  if (peer.family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&local.storage)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&peer.storage)->sin_addr.s_addr;
  }
  return IN6_ARE_ADDR_EQUAL(
      &reinterpret_cast<const sockaddr_in6*>(&local.storage)->sin6_addr,
      &reinterpret_cast<const sockaddr_in6*>(&peer.storage)->sin6_addr);
}

uint32_t ApplySocketBuffers(int fd, const Config& config, const SocketAddress& peer) {
  // Setting a size turns the kernel's autotuning off for that buffer, so
  // only on request, or for a peer on this host (config.h says why).
  uint32_t size = config.socket_buffer_size;
  if (size == 0 && config.loopback_socket_buffer_size != 0 && PeerIsLocal(fd, peer)) {
    size = config.loopback_socket_buffer_size;
  }
  if (size == 0) return 0;
  int value = static_cast<int>(size);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, sizeof value) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, sizeof value) != 0) {
    FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG, "socket buffers of %u bytes not applied: %s", size,
                     ErrnoText(errno).c_str());
    return 0;
  }
  return size;
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
