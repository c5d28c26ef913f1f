// What an entry of the context's epoll set points at. The epoll set is also
// the host's wakeup fd, so every fd that can announce work is in it: the
// internal notify eventfd, listener sockets, set-up sockets (the handshake
// and, afterwards, the peer's EOF) and doorbell eventfds.
#pragma once

namespace ferry_shm {

struct Pollable {
  enum Kind { kNotify, kListener, kConnSocket, kDoorbell };
  Kind kind;
  void* owner;  // Listener* or Conn*, nullptr for kNotify
};

}  // namespace ferry_shm
