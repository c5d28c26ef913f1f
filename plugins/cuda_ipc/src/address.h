// Socket addresses and the context's domain.
//
// Addresses are Unix domain socket names: "unix:@NAME" in the abstract
// namespace (listen("") picks "unix:@ferry-cuda-ipc-<pid>-<n>") or
// "unix:/path" on the file system; the "unix:" prefix may be left out.
// Abstract names need no cleanup: a killed worker leaves no socket file
// behind. They are scoped to the network namespace, which is why the
// domain names it.
#pragma once

#include "status.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <string>

namespace ferry_cuda_ipc {

struct UnixAddress {
  sockaddr_un sa{};
  socklen_t len = 0;
  bool abstract = false;
  std::string path;  // file system sockets: the path (to unlink)
  std::string text;  // canonical: "unix:@name" or "unix:/path"
};

// Parses `address`; INVALID_ARGUMENT (naming it) when it is not one.
Status ParseAddress(const std::string& address, UnixAddress* out);
// A fresh abstract name for listen("").
std::string NewListenName();

// "host=<boot id>;ipc=<ipc namespace inode>;net=<net namespace inode>".
std::string LocalDomain();

}  // namespace ferry_cuda_ipc
