// Values in and out of messages (value_codec.h).
#include "agent/value_codec.h"

#include "common/log.h"
#include "engine/route.h"

#include <atomic>
#include <cstring>

namespace ferry {

Status ValueCodec::Encode(Value& v, uint64_t to, wire::ValueMeta* meta, OutMessage* msg,
                          std::vector<wire::RRefRef>* forks) {
  return EncodeParts(v, /*hand_over=*/true, to, meta, msg, forks);
}

Status ValueCodec::EncodeShared(const std::shared_ptr<Value>& v, uint64_t to,
                                wire::ValueMeta* meta, OutMessage* msg,
                                std::vector<wire::RRefRef>* forks) {
  // The owner's value is sent without a copy: the message keeps the value
  // alive until its bytes left (its tensors are not handed over).
  msg->keepalive = v;
  return EncodeParts(*v, /*hand_over=*/false, to, meta, msg, forks);
}

Status ValueCodec::EncodeParts(Value& v, bool hand_over, uint64_t to,
                               wire::ValueMeta* meta, OutMessage* msg,
                               std::vector<wire::RRefRef>* forks) {
  for (size_t i = 0; i < v.tensors.size(); ++i) {
    DLManagedTensor* t = v.tensors[i];
    if (t == nullptr) {
      return Status(FERRY_INVALID_ARGUMENT, "tensor " + std::to_string(i) + " is NULL");
    }
    auto nbytes = TensorBytes(t->dl_tensor, i);
    if (!nbytes.ok()) return nbytes.status();
    const DLDevice device = t->dl_tensor.device;
    const uint64_t kind = route::MemoryKindOf(device);
    if (kind != FERRY_MEM_HOST && kind != FERRY_MEM_CUDA) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "tensor " + std::to_string(i) + " lives on " +
                        DeviceMemory::DeviceName(device) +
                        "; ferry carries host and CUDA device memory: copy it to "
                        "the CPU or a CUDA device");
    }
    if (kind == FERRY_MEM_CUDA && (engine_ == nullptr || !engine_->CanCarry(kind))) {
      return Status(FERRY_FAILED_PRECONDITION,
                    "tensor " + std::to_string(i) + " is in CUDA memory (" +
                        DeviceMemory::DeviceName(device) +
                        ") but no transport loaded in this worker can read device "
                        "memory: load the cuda_ipc transport (transport \"auto\", or "
                        "e.g. \"tcp,cuda_ipc\"), or copy the tensor to the CPU");
    }
    wire::TensorMeta tm;
    tm.dtype = t->dl_tensor.dtype;
    tm.device = t->dl_tensor.device;
    tm.shape.assign(t->dl_tensor.shape, t->dl_tensor.shape + t->dl_tensor.ndim);
    tm.nbytes = nbytes.value();
    meta->tensors.push_back(std::move(tm));
    OutTensor ot;
    ot.data = static_cast<const char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
    ot.nbytes = nbytes.value();
    ot.device = device;
    ot.stream = v.stream;
    msg->tensors.push_back(ot);
  }
  // Ownership moves to the message only once everything checked out.
  for (size_t i = 0; hand_over && i < v.tensors.size(); ++i) {
    msg->tensors[i].managed = v.tensors[i];
    v.tensors[i] = nullptr;
  }
  for (const auto& h : v.rrefs) {
    auto ref = rrefs_.Fork(*h, to);
    if (!ref.ok()) return ref.status();
    forks->push_back(ref.value());
    meta->rrefs.push_back(ref.value());
  }
  // A value handed over (a call's arguments, a handler's result) gives its
  // bytes to the message, once everything checked out; a shared one (an
  // owner's, being fetched) keeps them and lends a copy.
  if (hand_over) {
    meta->bytes = std::move(v.bytes);
  } else {
    meta->bytes = v.bytes;
  }
  return Status::Ok();
}

StatusOr<Value> ValueCodec::Decode(uint64_t from, wire::ValueMeta& meta, InMessage& msg) {
  if (meta.tensors.size() != msg.segments.size()) {
    return Status(FERRY_DATA_LOSS,
                  "malformed message: " + std::to_string(meta.tensors.size()) +
                      " tensors described, " + std::to_string(msg.segments.size()) +
                      " arrived");
  }
  for (size_t i = 0; i < meta.tensors.size(); ++i) {
    if (meta.tensors[i].nbytes != msg.segments[i].size) {
      return Status(FERRY_DATA_LOSS, "malformed message: tensor size mismatch");
    }
  }
  if (!msg.device_error.ok()) return msg.device_error;
  Value v;
  v.bytes = std::move(meta.bytes);
  for (size_t i = 0; i < meta.tensors.size(); ++i) {
    auto bytes = OnItsDevice(std::move(msg.segments[i]), meta.tensors[i], from, i);
    if (!bytes.ok()) return bytes.status();
    v.tensors.push_back(AdoptReceivedTensor(std::move(bytes.value()), meta.tensors[i]));
  }
  for (const auto& ref : meta.rrefs) v.rrefs.push_back(rrefs_.Receive(from, ref));
  return v;
}

StatusOr<AlignedBuffer> ValueCodec::OnItsDevice(AlignedBuffer bytes,
                                                const wire::TensorMeta& meta,
                                                uint64_t from, size_t index) {
  const bool want_device = route::MemoryKindOf(meta.device) == FERRY_MEM_CUDA;
  const bool on_device = route::NeedsDevice(route::MemoryKindOf(bytes.device));
  if (want_device == on_device) return bytes;
  const std::shared_ptr<DeviceMemory> dm =
      engine_ != nullptr ? engine_->device_memory() : nullptr;
  if (want_device) {
    // It came staged through host memory: back into device memory.
    if (!dm || !dm->can_alloc() || !dm->can_copy()) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        FERRY_LOG(FERRY_LOG_WARN, "agent",
                  "worker id " + std::to_string(from) + " sent a tensor from " +
                      DeviceMemory::DeviceName(meta.device) +
                      "; this worker cannot place it in device memory (no transport "
                      "with device memory services: load cuda_ipc), so it is "
                      "delivered in host memory (this is said once)");
      }
      return bytes;
    }
    auto dev = AlignedBuffer::OnDevice(dm, meta.device, bytes.size);
    if (!dev.ok()) return dev.status();
    Status s =
        dm->Copy(dev.value().data, meta.device, bytes.data, bytes.device, bytes.size, 0);
    if (!s.ok()) {
      return Status(s.code(), "placing tensor " + std::to_string(index) + " on " +
                                  DeviceMemory::DeviceName(meta.device) +
                                  " failed: " + s.message());
    }
    return std::move(dev.value());
  }
  // Host memory described, device memory arrived: down to the host.
  AlignedBuffer host(bytes.size);
  Status s = dm ? dm->Copy(host.data, DLDevice{kDLCPU, 0}, bytes.data, bytes.device,
                           bytes.size, 0)
                : Status(FERRY_INTERNAL, "no device memory services");
  if (!s.ok()) {
    return Status(FERRY_DATA_LOSS, "tensor " + std::to_string(index) +
                                       " arrived in device memory but is described "
                                       "as host memory: " +
                                       s.message());
  }
  return host;
}

namespace {

struct ReceivedTensor {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
  AlignedBuffer bytes;
};

void DeleteReceived(DLManagedTensor* self) {
  delete static_cast<ReceivedTensor*>(self->manager_ctx);
}

}  // namespace

DLManagedTensor* AdoptReceivedTensor(AlignedBuffer bytes, const wire::TensorMeta& meta) {
  auto* r = new ReceivedTensor();
  r->shape = meta.shape;
  r->bytes = std::move(bytes);
  DLTensor& t = r->managed.dl_tensor;
  t.data = r->bytes.data;
  // Where the bytes are: host memory, or device memory from the worker's
  // device allocator (freed into it by the deleter).
  t.device = r->bytes.device;
  t.ndim = static_cast<int32_t>(r->shape.size());
  t.dtype = meta.dtype;
  t.shape = r->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  r->managed.manager_ctx = r;
  r->managed.deleter = DeleteReceived;
  return &r->managed;
}

StatusOr<Value> CopyValue(const Value& v, const std::shared_ptr<DeviceMemory>& device) {
  Value copy;
  copy.bytes = v.bytes;
  for (DLManagedTensor* t : v.tensors) {
    if (t == nullptr) continue;
    auto nbytes = TensorBytes(t->dl_tensor, 0);
    if (!nbytes.ok()) return nbytes.status();
    const char* src = static_cast<char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
    const DLDevice dev = t->dl_tensor.device;
    AlignedBuffer buf;
    if (route::NeedsDevice(route::MemoryKindOf(dev))) {
      if (!device || !device->can_copy()) {
        return Status(FERRY_FAILED_PRECONDITION,
                      "copying a tensor on " + DeviceMemory::DeviceName(dev) +
                          " needs a transport with device memory services: load "
                          "cuda_ipc");
      }
      auto d = AlignedBuffer::OnDevice(device, dev, nbytes.value());
      if (!d.ok()) return d.status();
      buf = std::move(d.value());
      Status s = device->Copy(buf.data, dev, src, dev, nbytes.value(), v.stream);
      if (!s.ok()) return s;
    } else {
      buf = AlignedBuffer(nbytes.value());
      std::memcpy(buf.data, src, nbytes.value());
    }
    wire::TensorMeta tm;
    tm.dtype = t->dl_tensor.dtype;
    tm.device = dev;
    tm.shape.assign(t->dl_tensor.shape, t->dl_tensor.shape + t->dl_tensor.ndim);
    copy.tensors.push_back(AdoptReceivedTensor(std::move(buf), tm));
  }
  copy.rrefs = v.rrefs;
  return copy;
}

namespace {
std::atomic<uint64_t> snapshot_tensors{0};
std::atomic<uint64_t> snapshot_bytes{0};
}  // namespace

// Why a copy, and why up front: once a send is posted the transport reads
// the tensor's own memory until its SEND_DONE, which may come after
// ferry_rpc_async returned (a large tensor's bytes are still leaving), so
// the only alternatives to a copy are to make the caller wait for the send
// (at least as long as a copy: a transfer is a copy and more) or to let a
// later write reach the callee. A copy into a pooled, pre-faulted buffer
// costs ~7 ms for 64 MiB (a fresh allocation ~160 ms), and the buffer goes
// back to the pool when the send completes. Callers that need no copy say
// so: rpc_sync (the caller waits for the reply, which comes only after the
// callee received every byte), a result nothing else references (the
// Python binding checks), and the explicit zero-copy opt-in.
Status SnapshotHostTensors(Value& v, uint64_t zero_copy) {
  for (size_t i = 0; i < v.tensors.size(); ++i) {
    if (i < 64 && (zero_copy >> i) & 1) continue;
    DLManagedTensor* t = v.tensors[i];
    if (t == nullptr) continue;  // refused later, with the index
    const DLDevice dev = t->dl_tensor.device;
    if (route::MemoryKindOf(dev) != FERRY_MEM_HOST) continue;
    auto nbytes = TensorBytes(t->dl_tensor, i);
    if (!nbytes.ok()) return nbytes.status();
    // No bytes, nothing to tear (and a Python binding's object holder, an
    // empty tensor whose data pointer is the object, stays itself).
    if (nbytes.value() == 0) continue;
    AlignedBuffer buf(nbytes.value());
    std::memcpy(buf.data,
                static_cast<const char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset,
                nbytes.value());
    wire::TensorMeta tm;
    tm.dtype = t->dl_tensor.dtype;
    tm.device = dev;
    tm.shape.assign(t->dl_tensor.shape, t->dl_tensor.shape + t->dl_tensor.ndim);
    v.tensors[i] = AdoptReceivedTensor(std::move(buf), tm);
    if (t->deleter != nullptr) t->deleter(t);
    snapshot_tensors.fetch_add(1, std::memory_order_relaxed);
    snapshot_bytes.fetch_add(nbytes.value(), std::memory_order_relaxed);
  }
  return Status::Ok();
}

SnapshotCounts SnapshotTotals() {
  return {snapshot_tensors.load(std::memory_order_relaxed),
          snapshot_bytes.load(std::memory_order_relaxed)};
}

}  // namespace ferry
