// Values in and out of messages (value_codec.h).
#include "agent/value_codec.h"

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
    if (t->dl_tensor.device.device_type != kDLCPU &&
        t->dl_tensor.device.device_type != kDLCUDAHost) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "tensor " + std::to_string(i) + " lives on device type " +
                        std::to_string(t->dl_tensor.device.device_type) +
                        "; this version carries host memory only: copy it to the CPU");
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
    ot.device = t->dl_tensor.device;
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
  Value v;
  v.bytes = std::move(meta.bytes);
  for (size_t i = 0; i < meta.tensors.size(); ++i) {
    v.tensors.push_back(AdoptReceivedTensor(std::move(msg.segments[i]), meta.tensors[i]));
  }
  for (const auto& ref : meta.rrefs) v.rrefs.push_back(rrefs_.Receive(from, ref));
  return v;
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
  // Received bytes are in host memory: no transport places into device
  // memory yet.
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(r->shape.size());
  t.dtype = meta.dtype;
  t.shape = r->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  r->managed.manager_ctx = r;
  r->managed.deleter = DeleteReceived;
  return &r->managed;
}

StatusOr<Value> CopyValue(const Value& v) {
  Value copy;
  copy.bytes = v.bytes;
  for (DLManagedTensor* t : v.tensors) {
    if (t == nullptr) continue;
    auto nbytes = TensorBytes(t->dl_tensor, 0);
    if (!nbytes.ok()) return nbytes.status();
    AlignedBuffer buf(nbytes.value());
    std::memcpy(buf.data,
                static_cast<char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset,
                nbytes.value());
    wire::TensorMeta tm;
    tm.dtype = t->dl_tensor.dtype;
    tm.shape.assign(t->dl_tensor.shape, t->dl_tensor.shape + t->dl_tensor.ndim);
    copy.tensors.push_back(AdoptReceivedTensor(std::move(buf), tm));
  }
  copy.rrefs = v.rrefs;
  return copy;
}

}  // namespace ferry
