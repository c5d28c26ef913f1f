#include "listener.h"

#include "context.h"
#include "socket_util.h"

#include "ferry_plugin/log.h"

#include <sys/socket.h>

#include <cerrno>

namespace ferry_tcp {

Listener::~Listener() {
  ctx_->Unregister(fd_);
  CloseFd(fd_);
}

void Listener::OnEpoll(uint32_t /*events*/) {
  for (;;) {
    int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      ctx_->Accept(fd, user_data_);
      continue;
    }
    int err = errno;
    if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) {
      // Out of fds or memory: the connection stays in the backlog and is
      // accepted when the next one arrives (edge-triggered).
      FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "accept on %s failed: %s", address_.c_str(),
                       ErrnoText(err).c_str());
    }
    return;
  }
}

}  // namespace ferry_tcp
