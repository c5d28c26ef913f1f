// Receiving: frames off the socket, arrivals, and their answers. A device
// segment is placed by opening the sender's memory handle (cached per
// connection by the sender's buffer id, never by address), making the
// plugin's copy stream wait for the sender's interprocess event, and
// copying from the mapping into the destination; progress() polls the
// copy's completion event, then returns PLACE_DONE and acknowledges the
// message so the sender's send completes.
#include "connection.h"

#include "context.h"

#include "ferry_plugin/log.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry_cuda_ipc {

namespace {
constexpr size_t kReadChunk = 64 * 1024;
}

void Conn::Service() {
  while (state_ == State::kOpen && announced_ && !held_) {
    if (ParseOne()) continue;
    if (state_ != State::kOpen) break;
    // Need more bytes: the partial frame moves to the front, and the buffer
    // grows to hold all of it once its head says how long it is.
    if (rx_start_ > 0) {
      std::memmove(rx_.data(), rx_.data() + rx_start_, rx_end_ - rx_start_);
      rx_end_ -= rx_start_;
      rx_start_ = 0;
    }
    size_t need = rx_end_ + kReadChunk;
    if (rx_end_ >= sizeof(wire::FrameHead)) {
      wire::FrameHead h;
      std::memcpy(&h, rx_.data(), sizeof h);
      need = std::max<size_t>(need, sizeof h + h.body_len);  // checked by ParseOne
    }
    if (rx_.size() < need) rx_.resize(need);
    const ssize_t n = read(fd_, rx_.data() + rx_end_, rx_.size() - rx_end_);
    if (n > 0) {
      rx_end_ += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      Fail(FERRY_PEER_GONE,
           "cuda_ipc: the peer closed the connection or died (" + peer_ + ")");
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) FailErrno("read", errno);
    break;
  }
  UpdateEpoll();
}

Status Conn::CheckMsg(const wire::FrameHead& h, const char* body) {
  const Config& cfg = ctx_->config();
  if (h.num_segments > cfg.max_segments || h.header_len > cfg.max_header) {
    return Error(FERRY_DATA_LOSS,
                 "cuda_ipc: malformed frame from %s: %u segments, %u-byte header",
                 peer_.c_str(), h.num_segments, h.header_len);
  }
  uint64_t expect = uint64_t{h.num_segments} * sizeof(wire::SegDesc) + h.header_len;
  if (expect > h.body_len) {
    return Error(FERRY_DATA_LOSS, "cuda_ipc: malformed frame from %s", peer_.c_str());
  }
  for (uint32_t i = 0; i < h.num_segments; ++i) {
    wire::SegDesc d;
    std::memcpy(&d, body + i * sizeof d, sizeof d);
    if (d.kind == wire::kSegHost) {
      expect += d.length;
      if (d.length > cfg.max_host_bytes || expect > h.body_len) {
        return Error(FERRY_DATA_LOSS, "cuda_ipc: malformed frame from %s (lengths)",
                     peer_.c_str());
      }
    } else if (d.kind == wire::kSegDevice) {
      if (cfg.host_only) {
        return Error(FERRY_FAILED_PRECONDITION,
                     "cuda_ipc: %s sent device memory to a host-only context "
                     "(FERRY_CUDA_IPC_HOST_ONLY)",
                     peer_.c_str());
      }
      if (d.event_slot < -1) {
        return Error(FERRY_DATA_LOSS, "cuda_ipc: malformed event slot from %s",
                     peer_.c_str());
      }
    } else {
      return Error(FERRY_DATA_LOSS, "cuda_ipc: unknown segment kind %u from %s", d.kind,
                   peer_.c_str());
    }
  }
  if (expect != h.body_len) {
    return Error(FERRY_DATA_LOSS, "cuda_ipc: malformed frame from %s (body length)",
                 peer_.c_str());
  }
  return Status();
}

int Conn::LocalDevice(const wire::SegDesc& d) const {
  Gpu* gpu = ctx_->gpu();
  if (gpu == nullptr) return -1;
  char bus[wire::kBusIdSize + 1] = {0};
  std::memcpy(bus, d.bus_id, wire::kBusIdSize);
  return gpu->OrdinalOfBus(bus);
}

bool Conn::ParseOne() {
  const size_t avail = rx_end_ - rx_start_;
  if (avail < sizeof(wire::FrameHead)) return false;
  wire::FrameHead h;
  std::memcpy(&h, rx_.data() + rx_start_, sizeof h);
  const Config& cfg = ctx_->config();
  const uint64_t limit = uint64_t{cfg.max_segments} * sizeof(wire::SegDesc) +
                         cfg.max_header + cfg.max_host_bytes;
  if (h.magic != wire::kMagic || h.body_len > limit ||
      (h.type != wire::kMsg && h.type != wire::kAck)) {
    Fail(FERRY_DATA_LOSS,
         Format("cuda_ipc: %s sent a frame this plugin does not understand (magic "
                "0x%08x, type %u, %llu bytes): not a cuda_ipc peer of this version?",
                peer_.c_str(), h.magic, h.type,
                static_cast<unsigned long long>(h.body_len)));
    return false;
  }
  const size_t total = sizeof h + static_cast<size_t>(h.body_len);
  if (avail < total) return false;
  const char* body = rx_.data() + rx_start_ + sizeof h;
  if (h.type == wire::kAck) {
    rx_start_ += total;
    OnAck(h.seq);
    return true;
  }
  Status st = CheckMsg(h, body);
  if (!st.ok()) {
    Fail(st.code, st.message);
    return false;
  }
  const uint32_t n = h.num_segments;
  held_descs_.resize(n);
  if (n > 0) std::memcpy(held_descs_.data(), body, n * sizeof(wire::SegDesc));
  const char* header = body + n * sizeof(wire::SegDesc);
  const char* data = header + h.header_len;
  arrival_segments_.resize(n);
  held_device_ = false;
  for (uint32_t i = 0; i < n; ++i) {
    const wire::SegDesc& d = held_descs_[i];
    ferry_arrival_segment_t& s = arrival_segments_[i];
    s = ferry_arrival_segment_t{};
    s.struct_size = static_cast<uint32_t>(sizeof s);
    s.length = d.length;
    if (d.kind == wire::kSegHost) {
      s.device = {FERRY_DEVICE_CPU, 0};
      s.inline_data = data;
      data += d.length;
    } else {
      held_device_ = held_device_ || d.length > 0;  // an empty one needs no ACK
      // The same GPU in this process's numbering (by PCI bus id), so the
      // core places it there; the sender's ordinal when it is not visible.
      const int local = LocalDevice(d);
      s.device = {FERRY_DEVICE_CUDA, local >= 0 ? local : d.device};
      s.inline_data = nullptr;
      if ((d.flags & wire::kEventHandleIncluded) != 0 && d.event_slot >= 0) {
        // Sent once per slot: kept even if this message is discarded.
        event_handles_[d.event_slot].assign(d.event, d.event + wire::kIpcHandleSize);
      }
    }
  }
  held_ = true;
  held_seq_ = h.seq;
  if (held_device_ && ferry_cuda::profile::Enabled()) held_at_ = Clock::now();
  held_frame_len_ = total;
  QueuedEvent& e = ctx_->Emit(FERRY_EV_ARRIVAL, this, nullptr);
  e.msg_id = ++msg_id_;
  e.header = header;
  e.header_len = h.header_len;
  e.num_segments = n;
  e.segments = n > 0 ? arrival_segments_.data() : nullptr;
  e.segment_stride = sizeof(ferry_arrival_segment_t);
  return true;
}

void Conn::OnAck(uint64_t seq) {
  auto it = awaiting_ack_.find(seq);
  if (it == awaiting_ack_.end()) {
    FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "%s acknowledged message %llu, which is not pending",
                     peer_.c_str(), static_cast<unsigned long long>(seq));
    return;
  }
  std::unique_ptr<SendOp> op = std::move(it->second);
  awaiting_ack_.erase(it);
  if (ferry_cuda::profile::Enabled()) {
    static ferry_cuda::profile::Counter& stage =
        ferry_cuda::profile::Stage("cuda_ipc: device send() to its ACK");
    stage.Add(ferry_cuda::profile::NsSince(op->posted));
  }
  CompleteSend(std::move(op), FERRY_OK, "");
}

void Conn::ReleaseArrival() {
  held_ = false;
  held_descs_.clear();
  rx_start_ += held_frame_len_;
  held_frame_len_ = 0;
  if (rx_start_ == rx_end_) {
    rx_start_ = rx_end_ = 0;
    // A large message grew the buffer: give the memory back.
    if (rx_.size() > 4 * kReadChunk) {
      rx_.resize(kReadChunk);
      rx_.shrink_to_fit();
    }
  }
  ctx_->Kick(this);  // frames behind it may be buffered already
  UpdateEpoll();
}

ferry_status_t Conn::Discard(uint64_t msg_id, Status* error) {
  // close() released what was held: refused like send() after close().
  if (state_ == State::kClosing) {
    return Report(error, Error(FERRY_FAILED_PRECONDITION,
                               "cuda_ipc: discard() on a connection that is closing"));
  }
  if (!held_ || msg_id != msg_id_) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "cuda_ipc: discard() of msg_id %llu, which is not an "
                               "arrival the host holds on this connection",
                               static_cast<unsigned long long>(msg_id)));
  }
  const bool device = held_device_;
  const uint64_t seq = held_seq_;
  ReleaseArrival();
  if (device) QueueAck(seq);  // the sender's bytes are free again
  return FERRY_OK;
}

ferry_status_t Conn::Place(const ferry_place_args_t& args, Status* error) {
  if (state_ == State::kClosing) {
    return Report(error, Error(FERRY_FAILED_PRECONDITION,
                               "cuda_ipc: place() on a connection that is closing"));
  }
  if (!held_ || args.msg_id != msg_id_) {
    return Report(error,
                  Error(FERRY_INVALID_ARGUMENT,
                        "cuda_ipc: place() of msg_id %llu, which is not an arrival "
                        "the host holds on this connection",
                        static_cast<unsigned long long>(args.msg_id)));
  }
  if (args.num_dests != arrival_segments_.size()) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "cuda_ipc: place() got %u destinations for %zu segments",
                               args.num_dests, arrival_segments_.size()));
  }
  if (args.num_dests > 0 &&
      (args.dests == nullptr ||
       args.dest_stride < FERRY_STRUCT_SIZE(ferry_place_dest_t, capacity))) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "cuda_ipc: place() needs destinations and their stride"));
  }
  for (uint32_t i = 0; i < args.num_dests; ++i) {
    if (held_descs_[i].kind != wire::kSegDevice) continue;  // inline: ignored
    const auto* dest =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, args.dests, args.dest_stride, i);
    if (dest->data != nullptr && dest->capacity < held_descs_[i].length) {
      return Report(error,
                    Error(FERRY_INVALID_ARGUMENT,
                          "cuda_ipc: place(): segment %u has %llu bytes, its "
                          "destination holds %llu",
                          i, static_cast<unsigned long long>(held_descs_[i].length),
                          static_cast<unsigned long long>(dest->capacity)));
    }
  }
  if (!held_device_) {
    // Every byte was inline: the host copies them itself.
    ctx_->Emit(FERRY_EV_PLACE_DONE, this, args.user_data);
    ReleaseArrival();
    return FERRY_OK;
  }
  if (state_ != State::kOpen) {
    // The sender's handles are closed with the connection: the arrival
    // stays held until discard() or close().
    return Report(
        error, Error(fail_status_ == FERRY_OK ? FERRY_FAILED_PRECONDITION : fail_status_,
                     "%s", fail_message_.c_str()));
  }
  PendingCopy pc;
  pc.seq = held_seq_;
  pc.user_data = args.user_data;
  if (ferry_cuda::profile::Enabled()) {
    static ferry_cuda::profile::Counter& stage =
        ferry_cuda::profile::Stage("cuda_ipc: device arrival to place()");
    stage.Add(ferry_cuda::profile::NsSince(held_at_));
    pc.placed = Clock::now();
  }
  Status st = StartCopies(args, &pc);
  if (!st.ok()) {
    pc.status = st.code;
    pc.message = st.message;
  }
  ReleaseArrival();
  if (pc.done.empty()) {
    FinishCopy(pc, pc.status, pc.message);  // nothing in flight
  } else {
    copies_.push_back(std::move(pc));
  }
  return FERRY_OK;
}

Status Conn::OpenMapping(const wire::SegDesc& d, int dev, Mapping** out) {
  auto it = mappings_.find(d.buffer_id);
  if (it != mappings_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);  // most recent first
    *out = *it->second;
    return Status();
  }
  Gpu* gpu = ctx_->gpu();
  Status st = gpu->Use(dev);
  if (!st.ok()) return st;
  CUipcMemHandle handle;
  std::memcpy(&handle, d.mem, sizeof handle);
  CUdeviceptr base = 0;
  const CUresult r =
      gpu->cu().cuIpcOpenMemHandle(&base, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r != CUDA_SUCCESS) {
    return Error(FERRY_INTERNAL,
                 "cuda_ipc: cannot open the memory handle of %s's buffer %llu (its "
                 "device %d, %.16s) on device %d: %s",
                 peer_.c_str(), static_cast<unsigned long long>(d.buffer_id), d.device,
                 d.bus_id, dev, gpu->Err("cuIpcOpenMemHandle", r).c_str());
  }
  auto* m = new Mapping();
  m->buffer_id = d.buffer_id;
  m->dev = dev;
  m->base = base;
  lru_.push_front(m);
  mappings_[d.buffer_id] = lru_.begin();
  // Bounded: the least recently used go (closed now, or once the copies
  // reading them end).
  while (mappings_.size() > ctx_->config().handle_cache) {
    Mapping* old = lru_.back();
    lru_.pop_back();
    mappings_.erase(old->buffer_id);
    old->cached = false;
    if (old->pins == 0) CloseMapping(old);
  }
  *out = m;
  return Status();
}

void Conn::CloseMapping(Mapping* m) {
  Gpu* gpu = ctx_->gpu();
  if (!m->leaked && gpu != nullptr && gpu->Use(m->dev).ok()) {
    const CUresult r = gpu->cu().cuIpcCloseMemHandle(m->base);
    if (r != CUDA_SUCCESS) {
      FERRY_PLUGIN_LOG(FERRY_LOG_WARN, "%s", gpu->Err("cuIpcCloseMemHandle", r).c_str());
    }
  }
  delete m;
}

void Conn::Unpin(Mapping* m) {
  if (--m->pins == 0 && !m->cached) CloseMapping(m);
}

void Conn::DropMappings() {
  for (Mapping* m : lru_) {
    m->cached = false;
    if (m->pins == 0) CloseMapping(m);
  }
  lru_.clear();
  mappings_.clear();
}

Status Conn::OpenedEvent(int slot, int dev, CUevent* out) {
  auto it = opened_events_.find(slot);
  if (it != opened_events_.end()) {
    *out = it->second;
    return Status();
  }
  auto h = event_handles_.find(slot);
  if (h == event_handles_.end() || h->second.size() != sizeof(CUipcEventHandle)) {
    return Error(FERRY_DATA_LOSS,
                 "cuda_ipc: %s never sent the handle of its event slot %d", peer_.c_str(),
                 slot);
  }
  Gpu* gpu = ctx_->gpu();
  Status st = gpu->Use(dev);
  if (!st.ok()) return st;
  CUipcEventHandle handle;
  std::memcpy(&handle, h->second.data(), sizeof handle);
  CUevent ev = nullptr;
  const CUresult r = gpu->cu().cuIpcOpenEventHandle(&ev, handle);
  if (r != CUDA_SUCCESS) {
    return Error(FERRY_INTERNAL, "cuda_ipc: cannot open %s's event (slot %d): %s",
                 peer_.c_str(), slot, gpu->Err("cuIpcOpenEventHandle", r).c_str());
  }
  opened_events_[slot] = ev;
  *out = ev;
  return Status();
}

Status Conn::StartCopies(const ferry_place_args_t& args, PendingCopy* pc) {
  Gpu* gpu = ctx_->gpu();
  const ferry_cuda::Driver& cu = gpu->cu();
  std::vector<std::pair<int, CUstream>> used;  // devices whose streams copy
  Status failure;
  for (uint32_t i = 0; i < args.num_dests && failure.ok(); ++i) {
    const wire::SegDesc& d = held_descs_[i];
    if (d.kind != wire::kSegDevice || d.length == 0) continue;
    const auto* dest =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, args.dests, args.dest_stride, i);
    if (dest->data == nullptr) continue;  // dropped
    int dev = LocalDevice(d);
    if (dev < 0) {
      // Not visible here by bus id: open it in the destination's device
      // (peer access is enabled lazily by the driver), else device 0.
      const bool cuda_dest = FERRY_FIELD_PRESENT(dest, ferry_place_dest_t, device) &&
                             dest->device.type == FERRY_DEVICE_CUDA &&
                             gpu->valid(dest->device.id);
      dev = cuda_dest ? dest->device.id : 0;
    }
    CUdeviceptr src = 0;
    if (same_process_) {
      // cuIpcOpenMemHandle refuses our own handles: the sender's memory is
      // in this address space, borrowed until the ACK.
      src = static_cast<CUdeviceptr>(d.sender_base + d.offset);
    } else {
      Mapping* m = nullptr;
      if (!(failure = OpenMapping(d, dev, &m)).ok()) break;
      dev = m->dev;
      ++m->pins;
      pc->pins.push_back(m);
      src = m->base + d.offset;
    }
    CUstream stream = nullptr;
    if (!(failure = gpu->CopyStream(dev, &stream)).ok()) break;
    bool known = false;
    for (auto& u : used) known = known || u.first == dev;
    if (!known) used.emplace_back(dev, stream);
    CUresult r = CUDA_SUCCESS;
    if (d.event_slot >= 0) {
      CUevent ev = reinterpret_cast<CUevent>(static_cast<uintptr_t>(d.sender_event));
      if (!same_process_ && !(failure = OpenedEvent(d.event_slot, dev, &ev)).ok()) break;
      if (!(failure = gpu->Use(dev)).ok()) break;
      // After the sender's stream work, without blocking anyone's host.
      if ((r = cu.cuStreamWaitEvent(stream, ev, 0)) != CUDA_SUCCESS) {
        failure = Error(FERRY_INTERNAL, "cuda_ipc: %s",
                        gpu->Err("cuStreamWaitEvent", r).c_str());
        break;
      }
    } else if (!(failure = gpu->Use(dev)).ok()) {
      break;
    }
    // Unified addressing: the destination may be device or host memory.
    r = cu.cuMemcpyAsync(
        static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(dest->data)), src, d.length,
        stream);
    if (r != CUDA_SUCCESS) {
      failure = Error(FERRY_INTERNAL, "cuda_ipc: segment %u: %s", i,
                      gpu->Err("cuMemcpyAsync", r).c_str());
    }
  }
  // Whatever was submitted is tracked to its end, failure or not.
  for (auto& [dev, stream] : used) {
    CUevent done = nullptr;
    Status st = gpu->TakeEvent(dev, &done);
    CUresult r = CUDA_ERROR_UNKNOWN;
    if (st.ok() && (st = gpu->Use(dev)).ok()) r = cu.cuEventRecord(done, stream);
    if (r == CUDA_SUCCESS) {
      pc->done.emplace_back(dev, done);
      continue;
    }
    // No event to poll: wait here instead (rare, and still correct).
    if (done != nullptr) gpu->GiveEvent(dev, done);
    cu.cuStreamSynchronize(stream);
    if (failure.ok()) {
      failure = st.ok() ? Error(FERRY_INTERNAL, "cuda_ipc: %s",
                                gpu->Err("cuEventRecord", r).c_str())
                        : st;
    }
  }
  return failure;
}

void Conn::FinishCopy(PendingCopy& pc, ferry_status_t status, const std::string& why) {
  Gpu* gpu = ctx_->gpu();
  for (auto& [dev, ev] : pc.done) gpu->GiveEvent(dev, ev);
  pc.done.clear();
  for (Mapping* m : pc.pins) Unpin(m);
  pc.pins.clear();
  if (state_ == State::kOpen) {
    QueueAck(pc.seq);
  } else {
    // Pending on a connection that broke or closed: its status.
    if (status == FERRY_OK || status == FERRY_INTERNAL) {
      status = state_ == State::kClosing && fail_status_ == FERRY_OK ? FERRY_CANCELLED
                                                                     : fail_status_;
      if (status == FERRY_OK) status = FERRY_CANCELLED;
    }
  }
  if (status == FERRY_OK) {
    ctx_->Emit(FERRY_EV_PLACE_DONE, this, pc.user_data);
  } else {
    std::string text = why;
    if (text.empty()) {
      text = state_ == State::kOpen
                 ? "cuda_ipc: placement failed"
                 : (fail_message_.empty() ? "cuda_ipc: the connection was closed"
                                          : fail_message_);
    }
    ctx_->EmitError(FERRY_EV_PLACE_DONE, this, pc.user_data, status, text);
  }
}

bool Conn::PollCopies() {
  Gpu* gpu = ctx_->gpu();
  const ferry_cuda::Driver& cu = gpu->cu();
  const auto now = Clock::now();
  for (auto it = copies_.begin(); it != copies_.end();) {
    bool ended = true;
    CUresult bad = CUDA_SUCCESS;
    for (auto& [dev, ev] : it->done) {
      if (!gpu->Use(dev).ok()) continue;
      const CUresult r = cu.cuEventQuery(ev);  // never blocks
      if (r == CUDA_ERROR_NOT_READY) {
        ended = false;
        break;
      }
      if (r != CUDA_SUCCESS) bad = r;
    }
    if (ended) {
      if (ferry_cuda::profile::Enabled()) {
        static ferry_cuda::profile::Counter& stage =
            ferry_cuda::profile::Stage("cuda_ipc: place() to its copies' end");
        stage.Add(ferry_cuda::profile::NsSince(it->placed));
      }
      const ferry_status_t st = bad == CUDA_SUCCESS ? it->status : FERRY_INTERNAL;
      const std::string why = bad == CUDA_SUCCESS ? it->message
                                                  : "cuda_ipc: the copy failed: " +
                                                        gpu->Err("cuEventQuery", bad);
      FinishCopy(*it, st, why);
      it = copies_.erase(it);
      continue;
    }
    if (state_ != State::kOpen && now >= abandon_at_) {
      // The peer is gone and its work never ended: give up on the copy,
      // keep its mappings open for good (closing them under a copy that
      // may still run is unsafe) and say so.
      for (Mapping* m : it->pins) m->leaked = true;
      FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                       "a copy from %s did not end %u ms after the connection broke: "
                       "abandoned (its mappings stay open)",
                       peer_.c_str(), ctx_->config().abandon_ms);
      it->done.clear();  // the events stay with the copies that never ended
      FinishCopy(*it, fail_status_ == FERRY_OK ? FERRY_CANCELLED : fail_status_,
                 "cuda_ipc: the copy was abandoned: " + fail_message_);
      it = copies_.erase(it);
      continue;
    }
    ++it;
  }
  MaybeQueueClosed();
  return !copies_.empty();
}

}  // namespace ferry_cuda_ipc
