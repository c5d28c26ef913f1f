// The Unix domain socket that sets a connection up, passes its fds and
// watches the peer's liveness: a SOCK_SEQPACKET socket (message boundaries
// and fds travel together) at a path in a private directory. No abstract
// sockets: a filesystem path has owner and mode, so the directory (0700)
// and the socket (0600) keep other users out, and the listener checks
// SO_PEERCRED on top. Once set up, nothing more is sent on it: EOF (the
// kernel closes it when the peer dies, however it dies) means the peer is
// gone.
#pragma once

#include "status.h"

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace ferry_shm {

// The socket directory: `configured` when set, else $XDG_RUNTIME_DIR/ferry-shm
// or /tmp/ferry-shm-<uid>. Created 0700 if missing; refused unless it is a
// real directory owned by us with no group or other access.
Status PrivateSocketDir(const std::string& configured, std::string* dir);

// A fresh socket path in `dir`: "<dir>/<pid>-<n>-<random>.sock". The pid
// prefix lets SweepStaleSockets find files of dead processes.
std::string NewSocketPath(const std::string& dir);

// Removes socket files in `dir` left by dead processes (a SIGKILLed process
// cannot unlink its listener): the name's pid is gone and connecting is
// refused. Survivors call it when a peer dies, and listen() does too.
void SweepStaleSockets(const std::string& dir);

// Checks that `path` can be a socket address (absolute, short enough).
Status CheckSocketPath(const std::string& path);

// Binds and listens at `path` (0600; a stale socket file there is removed).
Status ListenAt(const std::string& path, int* fd);

// Starts a non-blocking connect. *pending: the listener's backlog is full,
// call RetryConnect later. Errors: UNAVAILABLE (nobody listens there, or
// no such path), PERMISSION_DENIED.
Status StartConnect(const std::string& path, int* fd, bool* pending);
Status RetryConnect(int fd, const std::string& path, bool* pending);

// Sends one message with up to 2 fds. *again: the socket buffer is full.
Status SendWithFds(int fd, const void* buf, size_t len, const int* fds, int nfds,
                   bool* again);

enum class RecvResult { kMessage, kWouldBlock, kEof };
// Receives one message and the fds that came with it (close-on-exec).
// Messages longer than `cap` or carrying more than `max_fds` fds are errors.
Status RecvWithFds(int fd, void* buf, size_t cap, size_t* len, int* fds, int max_fds,
                   int* nfds, RecvResult* result);

// The peer's pid/uid/gid as the kernel recorded them at connect().
Status PeerCredentials(int fd, ucred* out);

// True when the socket has hung up or has bytes to read (after set-up both
// mean the peer is gone). One poll(2) syscall.
bool SocketHungUp(int fd);

}  // namespace ferry_shm
