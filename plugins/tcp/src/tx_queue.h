// A connection's outgoing frames in order, written with sendmsg() (not
// writev: MSG_NOSIGNAL keeps a dead peer from raising SIGPIPE), or send()
// when what is left is one contiguous piece. One call gathers as many queued
// frames as fit in IOV_MAX pieces, so a burst of small sends after
// back-pressure costs one syscall, not one per message.
#pragma once

#include "send_op.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstddef>

namespace ferry_tcp {

class TxQueue {
 public:
  bool Empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }

  void PushBack(SendOp* op);
  void PushFront(SendOp* op);
  SendOp* PopFront();

  struct FlushResult {
    bool blocked = false;  // the socket buffer is full: wait for EPOLLOUT
    int error = 0;         // errno of a failed sendmsg (the stream is dead)
  };

  // Writes as much as the socket takes. Each fully written op is popped and
  // passed to on_written(op), which owns it from then on.
  template <typename OnWritten>
  FlushResult Flush(int fd, iovec* scratch, size_t max_iov, OnWritten&& on_written) {
    FlushResult result;
    while (head_ != nullptr) {
      size_t count = 0;
      size_t want = 0;
      msghdr msg{};
      if (head_->next == nullptr && head_->iov.size() - head_->iov_pos <= max_iov) {
        // One op (the latency path): its own iovecs, no gathering copy.
        count = head_->iov.size() - head_->iov_pos;
        msg.msg_iov = head_->iov.data() + head_->iov_pos;
        for (size_t i = 0; i < count; ++i) want += msg.msg_iov[i].iov_len;
      } else {
        const size_t limit = gather_limit_ < max_iov ? gather_limit_ : max_iov;
        for (SendOp* op = head_; op != nullptr && count < limit; op = op->next) {
          for (size_t i = op->iov_pos; i < op->iov.size() && count < limit; ++i) {
            scratch[count++] = op->iov[i];
            want += op->iov[i].iov_len;
          }
        }
        msg.msg_iov = scratch;
      }
      msg.msg_iovlen = count;
      // One piece (a small message, see EncodeMessage): send() skips
      // sendmsg()'s import of the msghdr and iovec array.
      ssize_t n = count == 1 ? send(fd, msg.msg_iov[0].iov_base, msg.msg_iov[0].iov_len,
                                    MSG_NOSIGNAL | MSG_DONTWAIT)
                             : sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          result.blocked = true;
          gather_limit_ = kMinGather;
        } else {
          result.error = errno;
        }
        return result;
      }
      Advance(static_cast<size_t>(n), on_written);
      if (static_cast<size_t>(n) < want) {
        // A short write means the buffer filled up (the kernel then reports
        // EPOLLOUT when space frees), so stop instead of trying again.
        result.blocked = true;
        gather_limit_ = count / 2 > kMinGather ? count / 2 : kMinGather;
        return result;
      }
      if (gather_limit_ < max_iov) gather_limit_ *= 2;  // it all went: gather more
    }
    return result;
  }

 private:
  // Pieces gathered for one sendmsg() of a backlog. A full socket takes
  // nothing, yet a gather of IOV_MAX pieces makes the kernel import them all
  // on every retry (and busy-poll mode retries on every spin): with
  // thousands of small replies queued, that would be most of a busy
  // worker's time. So after a full socket it gathers a few, and doubles
  // while everything it gathered goes out.
  static constexpr size_t kMinGather = 16;
  size_t gather_limit_ = ~size_t{0};

  template <typename OnWritten>
  void Advance(size_t n, OnWritten& on_written) {
    while (head_ != nullptr) {
      SendOp* op = head_;
      while (n > 0 && !op->Written()) {
        iovec& v = op->iov[op->iov_pos];
        if (n >= v.iov_len) {
          n -= v.iov_len;
          ++op->iov_pos;
        } else {
          v.iov_base = static_cast<char*>(v.iov_base) + n;
          v.iov_len -= n;
          n = 0;
        }
      }
      if (!op->Written()) return;
      on_written(PopFront());
    }
  }

  SendOp* head_ = nullptr;
  SendOp* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ferry_tcp
