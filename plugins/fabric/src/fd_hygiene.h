// Marking libfabric's file descriptors close-on-exec.
//
// libfabric 1.17 opens its sockets and epoll fds without FD_CLOEXEC (the tcp
// and rxm providers: listening socket, one socket per peer connection, epoll
// sets; checked with fcntl). A host that starts worker processes would leak
// them into every child: a leaked copy keeps a port bound and a connection
// half-alive after this process closed it, and peer death goes unseen. The
// plugin cannot pass SOCK_CLOEXEC into libfabric, so after each step that can
// make libfabric open fds (opening the endpoint, connecting, a peer
// connecting to us) it lists /proc/self/fd and sets FD_CLOEXEC on sockets and
// anon-inode fds (epoll, eventfd, timerfd) that appeared since its previous
// look. That costs a directory scan per connection set-up, never per
// message. Limitation: an inheritable socket the host itself creates in
// another thread in that same window would be marked too; set the parameter
// cloexec_sweep=0 to turn this off.
#pragma once

#include <sys/types.h>

#include <tuple>
#include <vector>

namespace ferry_fabric {

class FdSweeper {
 public:
  // Remembers which fds exist now.
  void Baseline();
  // Marks new sockets / anon-inode fds since the last Baseline() or Sweep()
  // close-on-exec, then takes a new baseline.
  void Sweep();

 private:
  // An fd number and what it refers to, so a number reused for a new
  // socket is not mistaken for the old file.
  using FdId = std::tuple<int, dev_t, ino_t>;
  static std::vector<FdId> OpenFds();
  std::vector<FdId> known_;  // sorted
};

}  // namespace ferry_fabric
