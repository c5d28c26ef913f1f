// Thin wrappers over the socket calls the plugin makes, and the mapping from
// errno to ferry status codes. Every socket is non-blocking and close-on-exec
// from birth.
#pragma once

#include "address.h"
#include "config.h"
#include "status.h"

#include <string>

namespace ferry_tcp {

// A non-blocking, close-on-exec TCP socket of `family`, or -1 and *err.
int OpenStreamSocket(int family, Status* err);

// TCP_NODELAY (latency: a small message must leave now, not wait for an
// ACK), SO_BUSY_POLL in busy-poll mode.
void ConfigureStreamSocket(int fd, const Config& config);

// True when `peer` is on this host: a loopback address, or the address of
// `fd`'s own (connected or connecting) end.
bool PeerIsLocal(int fd, const SocketAddress& peer);

// SO_SNDBUF and SO_RCVBUF of a connected (or connecting) socket:
// socket_buffer_size when set, else loopback_socket_buffer_size for a peer
// on this host, else nothing (kernel autotuning). Returns the size set, or 0.
uint32_t ApplySocketBuffers(int fd, const Config& config, const SocketAddress& peer);

// SO_ERROR, which also clears it.
int TakeSocketError(int fd);

// "Connection refused (errno 111)".
std::string ErrnoText(int err);

// The status for an I/O error on an established connection: the peer is
// gone for resets and broken pipes (and anything else that kills a stream).
ferry_status_t StatusForIoErrno(int err);

// The status for a failed connect(): UNAVAILABLE when nobody listens there or
// the network cannot reach it.
ferry_status_t StatusForConnectErrno(int err);

// The status for a failed socket()/bind()/listen().
ferry_status_t StatusForSetupErrno(int err);

// Closes `fd`, retrying nothing (close must not be retried on Linux).
void CloseFd(int fd);

}  // namespace ferry_tcp
