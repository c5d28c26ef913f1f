// The spin-then-sleep policy: when the host may sleep on the wakeup fd, and
// how it is woken without costing the busy path a syscall.
//
// The wakeup fd (the epoll set) must be readable whenever progress() has
// work, but the rings themselves cannot make it readable: only a doorbell
// can, and a doorbell costs the peer a syscall. So the context has two
// states:
//
//   active  the doorbells are not armed and the notify eventfd is kept
//           signalled, so the wakeup fd reads as "come back": a host that
//           waits on it returns at once and calls progress() again. Nothing
//           is ever written on the busy path.
//   armed   entered when a progress() call found nothing to do and then
//           nothing more while it spun for spin_us polling the rings. The
//           notify eventfd is drained, every connection's `sleeping` flag is
//           set (after which peers ring our doorbell), then everything is
//           checked once more: the wakeup fd is now readable exactly when
//           there is work (a doorbell, a socket, a host call's Kick()).
//           The first progress() that finds work returns to active.
//
// In busy-poll mode the context never arms: the host spins, the wakeup fd
// stays readable for good, and peers are told never to ring.
#include "clock.h"
#include "connection.h"
#include "context.h"
#include "shared_atomic.h"

#include "ferry_support/cpu_relax.h"

#include <unistd.h>

#include <cstdint>

namespace ferry_shm {

void Context::Kick() {
  if (armed_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    (void)!write(notify_fd_, &one, sizeof one);
  }
}

void Context::SignalNotify() {
  if (notify_signalled_) return;
  const uint64_t one = 1;
  (void)!write(notify_fd_, &one, sizeof one);
  notify_signalled_ = true;
}

void Context::DrainNotify() {
  uint64_t v;
  (void)!read(notify_fd_, &v, sizeof v);
  notify_signalled_ = false;
}

bool Context::SpinThenArm() {
  if (config_.spin_us > 0) {
    const uint64_t start = MonotonicNs();
    const uint64_t limit = uint64_t{config_.spin_us} * 1000;
    for (uint32_t i = 1;; ++i) {
      if (PassOverConns()) return true;
      if ((i & 15) == 0 && MonotonicNs() - start >= limit) break;
      ferry_support::CpuRelax();
    }
  }
  return Arm();
}

bool Context::Arm() {
  // Take what the sockets and doorbells announced first (this also resets
  // doorbells rung during the busy period).
  if (PollIo()) return true;
  DrainNotify();
  armed_.store(true, std::memory_order_seq_cst);
  for (Conn* c : conns_) c->Arm();
  FenceSeqCst();
  // Anything that arrived before a peer could see our flag is found here;
  // anything after rings the doorbell. Host calls publish their work under
  // a lock and then read armed_, so each check takes that lock: either we
  // see the work, or the caller sees armed_ and kicks.
  bool work = sink_.has_backlog();
  {
    std::lock_guard<std::mutex> lock(mu_);
    work |= !incoming_.empty();
  }
  for (size_t i = 0; i < conns_.size() && !work; ++i) work = conns_[i]->HasWork();
  if (work) {
    Disarm();
    return true;
  }
  return false;
}

void Context::Disarm() {
  armed_.store(false, std::memory_order_seq_cst);
  for (Conn* c : conns_) c->Disarm();
  SignalNotify();
}

}  // namespace ferry_shm
