// Context: listeners. listen() binds a socket in the private directory (or
// at the address given), close_listener() unlinks it at once, and progress()
// accepts: every accepted socket must come from our own uid (SO_PEERCRED)
// before a connection object, and any shared memory, exists for it.
#include "connection.h"
#include "context.h"
#include "handshake.h"
#include "setup_socket.h"

#include "ferry_plugin/log.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry_shm {
namespace {

// Tells a refused peer why before closing (best effort: it is our last word).
void SendRefusal(int fd, const Status& why) {
  HandshakeMsg m = MakeRefuse(why);
  bool again = false;
  (void)SendWithFds(fd, &m, sizeof m, nullptr, 0, &again);
}

}  // namespace

Status Context::Listen(const char* address, void* user_data, Listener** out) {
  std::string path = address != nullptr ? address : "";
  std::lock_guard<std::mutex> lock(mu_);
  if (path.empty()) {
    if (socket_dir_.empty()) {
      Status st = PrivateSocketDir(config_.socket_dir, &socket_dir_);
      if (!st.ok()) return st;
    }
    SweepStaleSockets(socket_dir_);
    path = NewSocketPath(socket_dir_);
  }
  int fd = -1;
  Status st = ListenAt(path, &fd);
  if (!st.ok()) return st;
  auto* l = new Listener();
  l->owner = this;
  l->fd = fd;
  l->path = path;
  l->user_data = user_data;
  listeners_.push_back(l);
  Register(fd, &l->poll);
  *out = l;
  return Status();
}

void Context::CloseListener(Listener* l) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(listeners_.begin(), listeners_.end(), l);
  if (it == listeners_.end()) return;
  listeners_.erase(it);
  l->open->store(false);
  Unregister(l->fd);
  close(l->fd);
  l->fd = -1;
  unlink(l->path.c_str());
  closed_listeners_.push_back(l);
  has_closed_listeners_.store(true, std::memory_order_release);
}

void Context::Accept(Listener* l) {
  std::lock_guard<std::mutex> lock(mu_);
  if (l->fd < 0) return;  // closed since epoll reported it
  for (;;) {
    int fd = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) {
        FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "shm: accept on %s: %s", l->path.c_str(),
                         std::strerror(errno));
      }
      if (errno == ECONNABORTED) continue;
      return;
    }
    ucred cred{};
    Status st = PeerCredentials(fd, &cred);
    if (st.ok() && cred.uid != geteuid()) {
      st = Error(FERRY_PERMISSION_DENIED,
                 "shm: refused a connection on %s from pid %d running as uid %u: "
                 "only uid %u may connect",
                 l->path.c_str(), static_cast<int>(cred.pid),
                 static_cast<unsigned>(cred.uid), static_cast<unsigned>(geteuid()));
    }
    if (!st.ok()) {
      FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "%s", st.message.c_str());
      SendRefusal(fd, st);
      close(fd);
      continue;
    }
    conns_.push_back(Conn::NewInbound(this, fd, cred, l->path, l->user_data, l->open));
  }
}

}  // namespace ferry_shm
