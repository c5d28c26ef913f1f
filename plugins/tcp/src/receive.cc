// The receive half of Conn: parsing the peer's stream into arrivals, holding
// reading while an arrival waits for its answer, and moving the rest of a
// message into the buffers place() names (or dropping it for discard()).
#include "connection.h"

#include "context.h"
#include "message_encoder.h"
#include "socket_util.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

namespace ferry_tcp {
namespace {

// Pieces per readv() while placing (plus one for the receive buffer).
constexpr size_t kMaxReadIov = 64;
// How far a read may go past the bytes the parser asked for, at least.
// Enough for a burst of small messages per recv(), small enough that a large
// message's payload is not staged in the receive buffer (and then copied)
// but read straight into the host's buffer once it is placed. A connection
// reads as far as its last message's metadata and inline bytes (read_ahead_,
// up to max_inline_size + kReadAhead), so that a message with a large inline
// segment takes one recv() too.
constexpr size_t kReadAhead = 4096;

constexpr size_t kPlaceDestMinSize = FERRY_STRUCT_SIZE(ferry_place_dest_t, capacity);

const std::string kNoMessage;

unsigned long long ULL(uint64_t v) {
  return static_cast<unsigned long long>(v);
}

}  // namespace

ferry_status_t Conn::Place(const ferry_place_args_t& args, Status* error) {
  if (state_ == State::kClosed) {
    return Report(error, UnusableError("place() on"));
  }
  if (rx_state_ != RxState::kHeld || args.msg_id != arrival_id_) {
    return Report(error, NoArrivalError(args.msg_id));
  }
  if (args.num_dests != arrival_.num_segments) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "tcp: place() for message %llu gives %u destinations, the "
                               "arrival has %u segments",
                               ULL(args.msg_id), args.num_dests, arrival_.num_segments));
  }
  if (args.num_dests > 0 &&
      (args.dests == nullptr || args.dest_stride < kPlaceDestMinSize)) {
    return Report(error,
                  Error(FERRY_INVALID_ARGUMENT,
                        "tcp: place() needs a destination array and dest_stride >= "
                        "%zu (got %p, %llu)",
                        kPlaceDestMinSize, static_cast<const void*>(args.dests),
                        ULL(args.dest_stride)));
  }
  // Check every destination before changing any state: a refused place()
  // leaves the arrival waiting for another answer.
  for (uint32_t i = 0; i < args.num_dests; ++i) {
    const ferry_arrival_segment_t& seg = arrival_segments_[i];
    if (seg.inline_data != nullptr) continue;
    const ferry_place_dest_t* d =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, args.dests, args.dest_stride, i);
    if (d->struct_size < kPlaceDestMinSize) {
      return Report(error, Error(FERRY_INVALID_ARGUMENT,
                                 "tcp: place() destination %u has struct_size %u (< %zu)",
                                 i, d->struct_size, kPlaceDestMinSize));
    }
    if (d->data == nullptr) continue;  // drop this segment
    if (d->capacity < seg.length) {
      return Report(error,
                    Error(FERRY_INVALID_ARGUMENT,
                          "tcp: place() destination %u holds %llu bytes but segment "
                          "%u of message %llu has %llu",
                          i, ULL(d->capacity), i, ULL(args.msg_id), ULL(seg.length)));
    }
    if (FERRY_FIELD_PRESENT(d, ferry_place_dest_t, device) &&
        !IsHostDevice(d->device.type)) {
      return Report(error, Error(FERRY_INVALID_ARGUMENT,
                                 "tcp: place() destination %u is device memory (DLPack "
                                 "type %d); the tcp transport writes host memory only",
                                 i, d->device.type));
    }
  }

  placement_.Clear();
  for (uint32_t i = 0; i < args.num_dests; ++i) {
    const ferry_arrival_segment_t& seg = arrival_segments_[i];
    if (seg.inline_data != nullptr) continue;
    const ferry_place_dest_t* d =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, args.dests, args.dest_stride, i);
    placement_.AddTarget(static_cast<char*>(d->data), seg.length);
  }
  ReleaseArrival();
  placing_for_host_ = true;
  place_user_data_ = args.user_data;
  rx_state_ = RxState::kPlacing;
  if (placement_.Done()) FinishPlacement(FERRY_OK, kNoMessage);
  ScheduleIfRxWork();
  return FERRY_OK;
}

ferry_status_t Conn::Discard(uint64_t msg_id, Status* error) {
  // close() already released whatever was held: refused like place() and
  // send() after close() (transport.h, place), and nothing changes.
  if (state_ == State::kClosed) return Report(error, UnusableError("discard() on"));
  if (rx_state_ != RxState::kHeld || msg_id != arrival_id_) {
    return Report(error, NoArrivalError(msg_id));
  }
  placement_.Clear();
  if (state_ == State::kOpen) {
    for (uint32_t i = 0; i < arrival_.num_segments; ++i) {
      const ferry_arrival_segment_t& seg = arrival_segments_[i];
      if (seg.inline_data == nullptr) placement_.AddTarget(nullptr, seg.length);
    }
  }
  ReleaseArrival();
  placing_for_host_ = false;
  rx_state_ = RxState::kPlacing;
  if (placement_.Done()) FinishPlacement(FERRY_OK, kNoMessage);
  ScheduleIfRxWork();
  return FERRY_OK;
}

void Conn::ServiceRx(size_t* budget) {
  for (;;) {
    size_t need = 0;
    switch (rx_state_) {
      case RxState::kHeld:
      case RxState::kDead:
        return;
      case RxState::kPlacing:
        if (!ContinuePlacement(budget)) return;
        continue;
      case RxState::kHello:
        if (ParseHelloFromBuffer(&need)) continue;
        break;
      case RxState::kFrame:
        if (ParseMessageFromBuffer(&need)) continue;
        break;
    }
    if (!ReadMore(need, budget)) return;
  }
}

bool Conn::ParseHelloFromBuffer(size_t* need) {
  wire::Hello hello;
  size_t consumed = 0;
  Status error;
  switch (ParseHello(rx_.data(), rx_.size(), &hello, &consumed, need, &error)) {
    case ParseResult::kNeedMore:
      return false;
    case ParseResult::kError:
      Fail(error.code,
           Format("tcp: connection with %s: %s", peer_.c_str(), error.message.c_str()));
      return true;
    case ParseResult::kDone:
      break;
  }
  rx_.Consume(consumed);
  peer_limits_ = hello;
  UpdateSendLimits();
  rx_state_ = RxState::kFrame;
  return true;
}

bool Conn::ParseMessageFromBuffer(size_t* need) {
  if (rx_.size() < wire::kPrefixSize) {  // the idle busy-poll path: no parse
    *need = wire::kPrefixSize;
    return false;
  }
  Status error;
  switch (ParseMessage(rx_.data(), rx_.size(), ctx_->receive_limits(), &arrival_segments_,
                       &arrival_, need, &error)) {
    case ParseResult::kNeedMore:
      return false;
    case ParseResult::kError:
      Fail(error.code, Format("tcp: malformed frame from %s: %s", peer_.c_str(),
                              error.message.c_str()));
      return true;
    case ParseResult::kDone:
      break;
  }
  arrival_id_ = next_msg_id_++;
  rx_state_ = RxState::kHeld;
  // The next message is likely the same shape: read its metadata and
  // inline bytes in one recv(), and ask for a little more so that the read
  // comes back short and says the socket is drained (a 4 KiB inline segment
  // took two recv() calls, 16 KiB three). Bounded so that a placed payload
  // is never staged much beyond kReadAhead.
  read_ahead_ = std::min(std::max(arrival_.meta_bytes + 512, kReadAhead),
                         size_t{ctx_->config().max_inline_size} + kReadAhead);
  QueuedEvent& e = ctx_->Emit(FERRY_EV_ARRIVAL, this, nullptr);
  e.msg_id = arrival_id_;
  e.header = arrival_.header;
  e.header_len = arrival_.header_len;
  e.segments = arrival_segments_.data();
  e.num_segments = arrival_.num_segments;
  return true;
}

void Conn::PrimeForBusyPoll() {
  if (state_ != State::kOpen) return;
  // A send blocked on a full socket buffer is retried on every spin, as the
  // raw floor's spinning send() does, instead of waiting for the EPOLLOUT
  // edge that only every 16th progress() collects: while a large message
  // streams out, the buffer drains within microseconds and each of those
  // waits left the connection idle. Costs a failing sendmsg() per spin,
  // only while something is waiting to be sent.
  if (tx_blocked_ && !tx_.Empty()) tx_blocked_ = false;
  if (rx_state_ == RxState::kFrame && rx_enabled_ && rx_.size() == 0 && !scheduled &&
      (tx_.Empty() || tx_blocked_) && rx_.PrepareRead(read_ahead_)) {
    // The idle spin: waiting for the next message with nothing else to do.
    // One recv() straight into the receive buffer, as ReadMore() would
    // make it; Service() (the parser, the rest of the state machine) runs
    // only when it brought bytes, or to report EOF and errors.
    const size_t space = std::min(rx_.tail_space(), read_ahead_);
    const ssize_t n = recv(fd_, rx_.tail(), space, 0);
    if (n > 0) {
      rx_.Produce(static_cast<size_t>(n));
      rx_ready_ = true;
      if (static_cast<size_t>(n) < space) NoteShortRead();
      ctx_->Schedule(this);
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      rx_ready_ = false;
      return;
    }
    // EOF or an error: Service() reports it (not here: breaking the
    // connection now would change the open set the caller is walking).
    if (n == 0 || errno != EINTR) deferred_rx_result_ = n == 0 ? -1 : errno;
  }
  rx_ready_ = true;
  ctx_->Schedule(this);
}

bool Conn::ReadMore(size_t need, size_t* budget) {
  if (fd_ < 0) {
    rx_state_ = RxState::kDead;
    return false;
  }
  if (!rx_ready_) return false;
  if (*budget == 0) {
    ctx_->Schedule(this);
    return false;
  }
  if (!rx_.PrepareRead(std::max(need, rx_.size() + 1))) {
    Fail(FERRY_RESOURCE_EXHAUSTED,
         Format("tcp: out of memory for a %zu-byte receive buffer "
                "(connection to %s)",
                need, peer_.c_str()));
    return false;
  }
  size_t want = std::max(need, rx_.size() + read_ahead_) - rx_.size();
  for (;;) {
    size_t space = std::min(rx_.tail_space(), want);
    ssize_t n;
    if (deferred_rx_result_ != 0) {  // what PrimeForBusyPoll's recv() got
      n = deferred_rx_result_ < 0 ? 0 : -1;
      errno = deferred_rx_result_ < 0 ? 0 : deferred_rx_result_;
      deferred_rx_result_ = 0;
    } else {
      n = recv(fd_, rx_.tail(), space, 0);
    }
    if (n > 0) {
      rx_.Produce(static_cast<size_t>(n));
      if (static_cast<size_t>(n) < space) NoteShortRead();
      *budget -= std::min(*budget, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) {
      FailOnEof();
      return false;
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      rx_ready_ = false;
      return false;
    }
    Fail(StatusForIoErrno(err), Format("tcp: receiving from %s failed: %s", peer_.c_str(),
                                       ErrnoText(err).c_str()));
    return false;
  }
}

bool Conn::ContinuePlacement(size_t* budget) {
  rx_.Consume(placement_.TakeBuffered(rx_.data(), rx_.size()));
  while (!placement_.Done()) {
    if (fd_ < 0) {
      ferry_status_t status =
          broken_status_ != FERRY_OK ? broken_status_ : FERRY_PEER_GONE;
      FinishPlacement(status, Format("%s (message cut short: %llu of %llu payload bytes "
                                     "never arrived)",
                                     broken_message_.c_str(), ULL(placement_.remaining()),
                                     ULL(placement_.total())));
      return true;
    }
    if (!rx_ready_) return false;
    if (*budget == 0) {
      ctx_->Schedule(this);
      return false;
    }
    iovec iov[kMaxReadIov + 1];
    bool covers_rest = false;
    size_t count = placement_.BuildIov(iov, kMaxReadIov, ctx_->drop_scratch(),
                                       Context::kDropScratchSize, &covers_rest);
    // The buffer is empty here (TakeBuffered took it all). When this read
    // can finish the message, let it also pick up the start of the next.
    if (covers_rest && rx_.PrepareRead(0)) {
      iov[count++] = iovec{rx_.tail(), std::min(rx_.tail_space(), kReadAhead)};
    }
    size_t want = 0;
    for (size_t i = 0; i < count; ++i) want += iov[i].iov_len;
    ssize_t n = readv(fd_, iov, static_cast<int>(count));
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) {
        rx_ready_ = false;
        return false;
      }
      Fail(StatusForIoErrno(err), Format("tcp: receiving from %s failed: %s",
                                         peer_.c_str(), ErrnoText(err).c_str()));
      return true;  // Fail() finished the placement
    }
    if (n == 0) {
      FailOnEof();
      return true;  // Fail() finished the placement
    }
    size_t used = placement_.Advance(static_cast<size_t>(n));
    rx_.Produce(static_cast<size_t>(n) - used);
    if (static_cast<size_t>(n) < want) NoteShortRead();
    *budget -= std::min(*budget, static_cast<size_t>(n));
  }
  FinishPlacement(FERRY_OK, kNoMessage);
  return true;
}

void Conn::FinishPlacement(ferry_status_t status, const std::string& message) {
  if (placing_for_host_) {
    if (status == FERRY_OK) {
      ctx_->Emit(FERRY_EV_PLACE_DONE, this, place_user_data_);
    } else {
      ctx_->EmitError(FERRY_EV_PLACE_DONE, this, place_user_data_, status, message);
    }
  }
  placing_for_host_ = false;
  place_user_data_ = nullptr;
  placement_.Clear();
  bool more = status == FERRY_OK && state_ == State::kOpen;
  rx_state_ = more ? RxState::kFrame : RxState::kDead;
  if (more) rx_.ShrinkIfIdle();
}

void Conn::NoteShortRead() {
  // A short read drained the socket, and the next byte will bring a new
  // edge. Not so for the end of the stream: its edge (EPOLLRDHUP) may have
  // come before we read the last bytes, so keep reading until recv() says 0.
  if (!peer_shut_down_) rx_ready_ = false;
}

void Conn::ReleaseArrival() {
  rx_.Consume(arrival_.meta_bytes);
  arrival_ = ParsedMessage{};
}

void Conn::ScheduleIfRxWork() {
  if (!rx_enabled_) return;
  bool work = false;
  switch (rx_state_) {
    case RxState::kPlacing:
      work = rx_.size() > 0 || rx_ready_ || fd_ < 0;
      break;
    case RxState::kHello:
    case RxState::kFrame:
      work = rx_.size() > 0 || rx_ready_;
      break;
    case RxState::kHeld:
    case RxState::kDead:
      break;
  }
  if (work) ctx_->Schedule(this);
}

Status Conn::NoArrivalError(uint64_t msg_id) const {
  if (rx_state_ == RxState::kHeld) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "tcp: message %llu is not waiting for an answer on the "
                 "connection to %s (message %llu is)",
                 ULL(msg_id), peer_.c_str(), ULL(arrival_id_));
  }
  return Error(FERRY_INVALID_ARGUMENT,
               "tcp: no message is waiting for an answer on the connection "
               "to %s (message %llu was already answered, or never arrived)",
               peer_.c_str(), ULL(msg_id));
}

}  // namespace ferry_tcp
