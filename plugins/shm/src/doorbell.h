// The doorbell: how a sleeping process is woken without costing the busy
// path a syscall. Each side owns an eventfd (in its context's epoll set, so
// the host's wakeup fd turns readable) and passes it to the peer. A process
// that is about to sleep sets `sleeping` in its own segment's OwnerLine,
// then re-checks its rings. After the peer publishes anything the sleeper
// may wait for (a record, consumed space, a finished message) it checks the
// flag and writes the eventfd only if it is set. The two sides form a Dekker
// handshake (store flag / fence / load ring versus store ring / fence / load
// flag), so at least one of them sees the other's store: no lost wakeups.
// A busy-polling peer never sleeps and says so at set-up; then even the
// fence is skipped.
#pragma once

#include "shared_atomic.h"
#include "shm_layout.h"
#include "status.h"

namespace ferry_shm {

class Doorbell {
 public:
  Doorbell() = default;
  ~Doorbell() { Close(); }
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // Creates our own eventfd (non-blocking, close-on-exec).
  Status Create();
  // Takes the peer's eventfd after checking it is one. `own` and `peer` are
  // the OwnerLines of our segment and of the peer's.
  Status Attach(int peer_fd, OwnerLine* own, OwnerLine* peer, bool peer_may_sleep);
  void Close();

  int own_fd() const { return own_fd_; }

  // We may sleep: ask the peer to ring. The caller fences once after arming
  // every doorbell, then re-checks for work.
  void Arm() {
    if (own_ != nullptr) StoreSeqCst(&own_->sleeping, 1u);
  }
  void Disarm() {
    if (own_ != nullptr && LoadRelaxed(&own_->sleeping) != 0) {
      StoreRelaxed(&own_->sleeping, 0u);
    }
  }
  // Resets our eventfd after it woke us.
  void Drain();

  // Called after publishing something the peer may be waiting for.
  void RingIfAsleep() {
    if (!peer_may_sleep_) return;
    FenceSeqCst();
    if (LoadRelaxed(&peer_->sleeping) != 0 && ExchangeSeqCst(&peer_->sleeping, 0u) != 0) {
      Ring();
    }
  }

 private:
  void Ring();

  int own_fd_ = -1;
  int peer_fd_ = -1;
  OwnerLine* own_ = nullptr;
  OwnerLine* peer_ = nullptr;
  bool peer_may_sleep_ = false;
};

}  // namespace ferry_shm
