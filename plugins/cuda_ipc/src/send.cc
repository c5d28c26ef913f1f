// Sending: a message is one frame with the header and every host segment's
// bytes. A device segment travels as a descriptor: the legacy IPC handle of
// its allocation's base (cached by buffer id) and its offset. The producer
// stream's work is waited for by the sender (an event it polls before the
// frame leaves: producer_wait host, the default) or by the receiver's copy
// stream on the GPU (an interprocess event slot: producer_wait gpu).
// Memory that refuses a legacy handle
// (VMM allocations, e.g. torch's expandable segments) is first copied on
// the stream into a bounce block of the plugin's pool (plain cuMemAlloc,
// always exportable). The send completes on the receiver's ACK.
#include "connection.h"

#include "context.h"

#include "ferry_plugin/log.h"

#include <cstring>

namespace ferry_cuda_ipc {

namespace {

constexpr size_t kMaxSlots = 4096;
constexpr size_t kMaxExported = 4096;

bool IsHost(const ferry_device_t& d) {
  return d.type == 0 || d.type == FERRY_DEVICE_CPU || d.type == FERRY_DEVICE_CUDA_HOST;
}

}  // namespace

Status Conn::TakeSlot(int dev, int* slot) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].busy && slots_[i].dev == dev) {
      slots_[i].busy = true;
      *slot = static_cast<int>(i);
      return Status();
    }
  }
  if (slots_.size() >= kMaxSlots) {
    return Error(FERRY_UNAVAILABLE,
                 "cuda_ipc: %zu device messages wait for their ACK on this connection: "
                 "call progress() and send again",
                 slots_.size());
  }
  Gpu* gpu = ctx_->gpu();
  Status st = gpu->Use(dev);
  if (!st.ok()) return st;
  EventSlot s;
  s.dev = dev;
  CUresult r =
      gpu->cu().cuEventCreate(&s.ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
  if (r != CUDA_SUCCESS) {
    return Error(FERRY_INTERNAL, "cuda_ipc: %s",
                 gpu->Err("cuEventCreate(CU_EVENT_INTERPROCESS)", r).c_str());
  }
  if ((r = gpu->cu().cuIpcGetEventHandle(&s.handle, s.ev)) != CUDA_SUCCESS) {
    gpu->cu().cuEventDestroy(s.ev);
    return Error(FERRY_INTERNAL, "cuda_ipc: %s",
                 gpu->Err("cuIpcGetEventHandle", r).c_str());
  }
  s.busy = true;
  slots_.push_back(s);
  *slot = static_cast<int>(slots_.size() - 1);
  return Status();
}

// `recorded`: the (stream, device) pairs this message recorded an event on
// so far, with the device (producer_wait host) or the event slot (gpu).
Status Conn::ExportSegment(const ferry_segment_t& seg, uint64_t stream, wire::SegDesc* d,
                           SendOp* op, std::vector<std::pair<uint64_t, int>>* recorded) {
  Gpu* gpu = ctx_->gpu();
  const ferry_cuda::Driver& cu = gpu->cu();
  int dev = seg.device.id;
  Status st = gpu->Use(dev);
  if (!st.ok()) return st;
  const CUdeviceptr ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(seg.data));
  // The device the memory really is on, whatever the segment says.
  int ordinal = -1;
  if (cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) ==
          CUDA_SUCCESS &&
      ordinal != dev && gpu->valid(ordinal)) {
    dev = ordinal;
    if (!(st = gpu->Use(dev)).ok()) return st;
  }
  CUstream producer = stream == FERRY_STREAM_READY ? nullptr : StreamOf(stream);

  // The allocation's base and its never-reused id; its handle (cached).
  CUdeviceptr base = 0;
  unsigned long long buffer_id = 0;
  CUipcMemHandle handle{};
  CUresult r =
      cu.cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr);
  if (r == CUDA_SUCCESS) {
    r = cu.cuPointerGetAttribute(&buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr);
  }
  if (r == CUDA_SUCCESS) {
    auto it = exported_.find(buffer_id);
    if (it != exported_.end()) {
      handle = it->second;
    } else if ((r = cu.cuIpcGetMemHandle(&handle, base)) == CUDA_SUCCESS) {
      if (exported_.size() >= kMaxExported) exported_.clear();
      exported_[buffer_id] = handle;
    }
  }
  uint64_t offset = ptr - base;
  if (r != CUDA_SUCCESS) {
    // No legacy handle for this memory (VMM): copy it on the producer's
    // stream into an exportable block, and send that.
    FERRY_PLUGIN_LOG(FERRY_LOG_DEBUG,
                     "a %llu-byte segment on device %d refuses a legacy IPC handle (%s): "
                     "sent through a bounce buffer",
                     static_cast<unsigned long long>(seg.length), dev,
                     gpu->Err("cuIpcGetMemHandle", r).c_str());
    void* block = nullptr;
    if (!(st = gpu->Alloc(dev, seg.length, &block)).ok()) return st;
    op->bounces.emplace_back(dev, block);
    if (producer == nullptr && !(st = gpu->SendStream(dev, &producer)).ok()) return st;
    if (!(st = gpu->Use(dev)).ok()) return st;
    const CUdeviceptr b = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(block));
    if ((r = cu.cuMemcpyDtoDAsync(b, ptr, seg.length, producer)) != CUDA_SUCCESS ||
        (r = cu.cuPointerGetAttribute(&buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, b)) !=
            CUDA_SUCCESS) {
      return Error(FERRY_INTERNAL, "cuda_ipc: bounce copy: %s",
                   gpu->Err("cuMemcpyDtoDAsync", r).c_str());
    }
    auto it = exported_.find(buffer_id);
    if (it != exported_.end()) {
      handle = it->second;
    } else if ((r = cu.cuIpcGetMemHandle(&handle, b)) == CUDA_SUCCESS) {
      exported_[buffer_id] = handle;
    } else {
      return Error(FERRY_INTERNAL, "cuda_ipc: the bounce buffer: %s",
                   gpu->Err("cuIpcGetMemHandle", r).c_str());
    }
    base = b;
    offset = 0;
  }
  d->kind = wire::kSegDevice;
  d->device = dev;
  d->offset = offset;
  d->sender_base = base;
  d->buffer_id = buffer_id;
  std::memcpy(d->mem, &handle, sizeof handle);
  const std::string bus = gpu->BusId(dev);
  std::strncpy(d->bus_id, bus.c_str(), wire::kBusIdSize - 1);
  d->event_slot = -1;
  if (producer == nullptr) return Status();  // FERRY_STREAM_READY: nothing to wait for

  const uint64_t key = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(producer));
  auto record_after_producer = [&](CUevent ev) -> Status {
    Status used = gpu->Use(dev);
    if (!used.ok()) return used;
    const CUresult rec = cu.cuEventRecord(ev, producer);
    if (rec == CUDA_SUCCESS) return Status();
    return Error(FERRY_INVALID_ARGUMENT,
                 "cuda_ipc: cannot record an event on the segment's stream 0x%llx "
                 "(a stream of device %d's primary context?): %s",
                 static_cast<unsigned long long>(stream), dev,
                 gpu->Err("cuEventRecord", rec).c_str());
  };
  if (!ctx_->config().producer_wait_gpu) {
    // The sender waits: a plain event per (stream, device) and message,
    // polled before the frame is written; the receiver then copies at once.
    // A receiver's GPU-side wait on an interprocess event instead keeps its
    // context on a GPU time-shared by the two processes while the sender's
    // event waits for its turn: 0.47x the in-process copy at 64 MiB against
    // 0.97x this way (H200, docs/benchmarks/cuda-ipc.md).
    for (auto& [k, s] : *recorded) {
      if (k == key && s == dev) return Status();  // recorded for this message
    }
    CUevent ev = nullptr;
    if (!(st = gpu->TakeEvent(dev, &ev)).ok()) return st;
    op->producers.emplace_back(dev, ev);
    if (!(st = record_after_producer(ev)).ok()) return st;
    recorded->emplace_back(key, dev);
    return Status();
  }
  // One interprocess event per (stream, device) and message, recorded after
  // the producer's work (and the bounce copy, if any).
  int slot = -1;
  for (auto& [k, s] : *recorded) {
    if (k == key && slots_[static_cast<size_t>(s)].dev == dev) slot = s;
  }
  if (slot < 0) {
    if (!(st = TakeSlot(dev, &slot)).ok()) return st;
    op->slots.push_back(slot);
    if (!(st = record_after_producer(slots_[static_cast<size_t>(slot)].ev)).ok())
      return st;
    recorded->emplace_back(key, slot);
  }
  const EventSlot& s = slots_[static_cast<size_t>(slot)];
  d->event_slot = slot;
  d->sender_event = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.ev));
  if (!s.handle_sent) {
    d->flags |= wire::kEventHandleIncluded;
    std::memcpy(d->event, &s.handle, sizeof s.handle);
  }
  return Status();
}

ferry_status_t Conn::Send(const ferry_send_args_t& args, Status* error) {
  const Config& cfg = ctx_->config();
  // 1. Limits, from the lengths alone.
  if (args.num_segments > cfg.max_segments) {
    return Report(error, Error(FERRY_RESOURCE_EXHAUSTED,
                               "cuda_ipc: %u segments, at most %u per message",
                               args.num_segments, cfg.max_segments));
  }
  if (args.header_len > cfg.max_header) {
    return Report(
        error, Error(FERRY_RESOURCE_EXHAUSTED, "cuda_ipc: a %llu-byte header, at most %u",
                     static_cast<unsigned long long>(args.header_len), cfg.max_header));
  }
  if (args.num_segments > 0 &&
      (args.segments == nullptr ||
       args.segment_stride < FERRY_STRUCT_SIZE(ferry_segment_t, length))) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT,
                               "cuda_ipc: send() needs segments and their stride"));
  }
  uint64_t total = args.header_len, host = 0;
  for (uint32_t i = 0; i < args.num_segments; ++i) {
    const auto* seg =
        FERRY_ELEMENT_AT(const ferry_segment_t, args.segments, args.segment_stride, i);
    const bool is_host =
        !FERRY_FIELD_PRESENT(seg, ferry_segment_t, device) || IsHost(seg->device);
    if (seg->length > cfg.max_message || total + seg->length > cfg.max_message) {
      return Report(error, Error(FERRY_RESOURCE_EXHAUSTED,
                                 "cuda_ipc: the message exceeds %llu bytes",
                                 static_cast<unsigned long long>(cfg.max_message)));
    }
    total += seg->length;
    if (is_host) host += seg->length;
  }
  if (host > cfg.max_host_bytes) {
    return Report(error,
                  Error(FERRY_RESOURCE_EXHAUSTED,
                        "cuda_ipc: %llu bytes of host memory in one message, at "
                        "most %llu (max_host_bytes; shm or tcp carry bulk host data)",
                        static_cast<unsigned long long>(host),
                        static_cast<unsigned long long>(cfg.max_host_bytes)));
  }
  // 2. Pointers and devices.
  if (args.header_len > 0 && args.header == nullptr) {
    return Report(error, Error(FERRY_INVALID_ARGUMENT, "cuda_ipc: header is NULL"));
  }
  bool device = false;
  for (uint32_t i = 0; i < args.num_segments; ++i) {
    const auto* seg =
        FERRY_ELEMENT_AT(const ferry_segment_t, args.segments, args.segment_stride, i);
    if (seg->length > 0 && seg->data == nullptr) {
      return Report(error, Error(FERRY_INVALID_ARGUMENT,
                                 "cuda_ipc: segment %u has %llu bytes at NULL", i,
                                 static_cast<unsigned long long>(seg->length)));
    }
    if (!FERRY_FIELD_PRESENT(seg, ferry_segment_t, device) || IsHost(seg->device))
      continue;
    if (seg->device.type != FERRY_DEVICE_CUDA) {
      return Report(error, Error(FERRY_INVALID_ARGUMENT,
                                 "cuda_ipc: segment %u is in memory of device type %d: "
                                 "this plugin moves host and CUDA device memory",
                                 i, seg->device.type));
    }
    if (ctx_->gpu() == nullptr) {
      return Report(error,
                    Error(FERRY_INVALID_ARGUMENT,
                          "cuda_ipc: segment %u is in CUDA memory, but this context "
                          "is host-only (FERRY_CUDA_IPC_HOST_ONLY)",
                          i));
    }
    if (!ctx_->gpu()->valid(seg->device.id)) {
      return Report(error,
                    Error(FERRY_INVALID_ARGUMENT,
                          "cuda_ipc: segment %u is on CUDA device %d; this process "
                          "sees %d",
                          i, seg->device.id, ctx_->gpu()->device_count()));
    }
    device = device || seg->length > 0;
  }
  // 3. The connection's state.
  if (state_ == State::kClosing) {
    return Report(error, Error(FERRY_FAILED_PRECONDITION,
                               "cuda_ipc: send() on a connection that is closing"));
  }
  if (state_ == State::kFailed && announced_) {
    const ferry_status_t code =
        fail_status_ == FERRY_UNAVAILABLE ? FERRY_FAILED_PRECONDITION : fail_status_;
    return Report(error, Error(code, "%s", fail_message_.c_str()));
  }
  if (state_ == State::kFailed) {
    // Posted before the host saw the failed CONNECTED: fails with it.
    ctx_->EmitError(FERRY_EV_SEND_DONE, this, args.user_data, fail_status_,
                    fail_message_);
    return FERRY_OK;
  }
  // 4. The frame: head, descriptors, header, then the host bytes (borrowed).
  auto op = std::make_unique<SendOp>();
  op->seq = next_seq_;
  op->user_data = args.user_data;
  const uint32_t n = args.num_segments;
  const size_t descs = n * sizeof(wire::SegDesc);
  op->meta.assign(sizeof(wire::FrameHead) + descs + args.header_len, 0);
  std::vector<std::pair<uint64_t, int>> recorded;
  auto* d0 = reinterpret_cast<wire::SegDesc*>(op->meta.data() + sizeof(wire::FrameHead));
  op->iov.push_back({op->meta.data(), op->meta.size()});
  for (uint32_t i = 0; i < n; ++i) {
    const auto* seg =
        FERRY_ELEMENT_AT(const ferry_segment_t, args.segments, args.segment_stride, i);
    wire::SegDesc d{};
    d.length = seg->length;
    d.event_slot = -1;
    const bool is_host =
        !FERRY_FIELD_PRESENT(seg, ferry_segment_t, device) || IsHost(seg->device);
    if (is_host) {
      d.kind = wire::kSegHost;
      if (seg->length > 0) op->iov.push_back({const_cast<void*>(seg->data), seg->length});
    } else if (seg->length == 0) {
      d.kind = wire::kSegDevice;
      d.device = seg->device.id;
    } else {
      const uint64_t stream = FERRY_FIELD_PRESENT(seg, ferry_segment_t, stream)
                                  ? seg->stream
                                  : FERRY_STREAM_READY;
      Status st = ExportSegment(*seg, stream, &d, op.get(), &recorded);
      if (!st.ok()) {
        ReleaseSendResources(op.get());
        return Report(error, Error(st.code, "%s (segment %u)", st.message.c_str(), i));
      }
    }
    std::memcpy(reinterpret_cast<char*>(d0) + i * sizeof d, &d, sizeof d);
  }
  // Posted: the peer will have each new slot's handle from this message on.
  for (int slot : op->slots) slots_[static_cast<size_t>(slot)].handle_sent = true;
  if (args.header_len > 0) {
    std::memcpy(op->meta.data() + sizeof(wire::FrameHead) + descs, args.header,
                args.header_len);
  }
  wire::FrameHead h{};
  h.magic = wire::kMagic;
  h.type = wire::kMsg;
  h.num_segments = n;
  h.header_len = static_cast<uint32_t>(args.header_len);
  h.seq = next_seq_++;
  h.body_len = descs + args.header_len + host;
  std::memcpy(op->meta.data(), &h, sizeof h);
  op->needs_ack = device;
  if (device && ferry_cuda::profile::Enabled()) op->posted = Clock::now();
  QueueFrame(std::move(op));
  return FERRY_OK;
}

}  // namespace ferry_cuda_ipc
