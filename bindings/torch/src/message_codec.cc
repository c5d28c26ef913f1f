// message_codec (message_codec.h).
#include "message_codec.h"

#include <c10/core/CPUAllocator.h>
#include <torch/csrc/distributed/rpc/utils.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace ferry_torch {
namespace {

using torch::distributed::rpc::Message;
using torch::distributed::rpc::MessageType;

// The bytes' layout: a fixed header, then torch's payload, then the pickle
// of the tensors' metadata. Little-endian, as every host ferry runs on.
constexpr uint32_t kMagic = 0x314d5446;  // "FTM1"
struct Header {
  uint32_t magic;
  int32_t type;  // torch's MessageType
  uint64_t payload_size;
  uint64_t pickle_size;
};

// One storage as a DLPack tensor: its bytes, kept alive by `storage` until
// ferry calls the deleter.
struct StorageTensor {
  DLManagedTensor managed{};
  int64_t shape[1] = {0};
  c10::Storage storage;
};

DLManagedTensor* StorageAsDLPack(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.device().is_cpu(),
              "the FERRY rpc backend sends CPU tensors only; got one on ",
              tensor.device(), " (move it to the CPU first)");
  auto* t = new StorageTensor();
  t->storage = tensor.storage();
  t->shape[0] = static_cast<int64_t>(t->storage.nbytes());
  DLTensor& dl = t->managed.dl_tensor;
  dl.data = t->storage.data();
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = 1;
  dl.dtype = DLDataType{kDLUInt, 8, 1};
  dl.shape = t->shape;
  dl.strides = nullptr;
  dl.byte_offset = 0;
  t->managed.manager_ctx = t;
  t->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<StorageTensor*>(self->manager_ctx);
  };
  return &t->managed;
}

// Storages are read by torch's CPU kernels with aligned vector loads where
// they can; ferry places segments in its pooled buffers (aligned), but a
// small segment that arrived inline may sit at any address: such a one is
// copied into an allocation of torch's own.
constexpr uintptr_t kAlignment = 16;

at::DataPtr SegmentAsDataPtr(DLManagedTensor* segment) {
  TORCH_CHECK(segment != nullptr, "FERRY rpc: a message lacks one of its storages");
  auto* bytes =
      static_cast<char*>(segment->dl_tensor.data) + segment->dl_tensor.byte_offset;
  const int64_t n = segment->dl_tensor.ndim == 1 ? segment->dl_tensor.shape[0] : 0;
  if (reinterpret_cast<uintptr_t>(bytes) % kAlignment != 0 && n > 0) {
    at::DataPtr copy = c10::GetCPUAllocator()->allocate(static_cast<size_t>(n));
    std::memcpy(copy.get(), bytes, static_cast<size_t>(n));
    if (segment->deleter) segment->deleter(segment);
    return copy;
  }
  return at::DataPtr(
      bytes, segment,
      [](void* ctx) {
        auto* m = static_cast<DLManagedTensor*>(ctx);
        if (m->deleter) m->deleter(m);
      },
      at::Device(at::kCPU));
}

}  // namespace

ferry::Payload EncodeMessage(const Message& message) {
  std::string pickle;
  torch::jit::Pickler pickler([&pickle](const char* p, size_t n) { pickle.append(p, n); },
                              nullptr, nullptr, nullptr);
  pickler.protocol();
  // Views over a small part of a large storage are cloned first (torch's
  // own rule, as TensorPipe's agent applies it): the wire carries storages.
  pickler.pushIValue(torch::distributed::rpc::cloneSparseTensors(message.tensors()));
  pickler.stop();

  const std::vector<char>& payload = message.payload();
  const Header h{kMagic, static_cast<int32_t>(message.type()), payload.size(),
                 pickle.size()};
  std::string bytes;
  bytes.reserve(sizeof h + payload.size() + pickle.size());
  bytes.append(reinterpret_cast<const char*>(&h), sizeof h);
  bytes.append(payload.data(), payload.size());
  bytes.append(pickle);

  ferry::Payload out(std::move(bytes));
  for (const at::Tensor& storage_holder : pickler.tensorData()) {
    out.Tensor(StorageAsDLPack(storage_holder));
  }
  return out;
}

c10::intrusive_ptr<Message> DecodeMessage(ferry::Message& received) {
  const std::string_view bytes = received.bytes();
  Header h{};
  TORCH_CHECK(bytes.size() >= sizeof h, "FERRY rpc: a message of ", bytes.size(),
              " bytes is too short to be a torch message");
  std::memcpy(&h, bytes.data(), sizeof h);
  TORCH_CHECK(
      h.magic == kMagic && sizeof h + h.payload_size + h.pickle_size == bytes.size(),
      "FERRY rpc: a message is not a torch message of this version "
      "(another ferry build at the other end?)");
  const char* payload_begin = bytes.data() + sizeof h;
  std::vector<char> payload(payload_begin, payload_begin + h.payload_size);
  const char* pickle = payload_begin + h.payload_size;

  size_t read_at = 0;
  const uint32_t num_storages = received.num_tensors();
  torch::jit::Unpickler unpickler(
      [&](char* out, size_t n) -> size_t {
        n = std::min<size_t>(n, h.pickle_size - read_at);
        std::memcpy(out, pickle + read_at, n);
        read_at += n;
        return n;
      },
      /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
      [&](const std::string& key) -> at::DataPtr {
        const unsigned long index = std::stoul(key);
        TORCH_CHECK(index < num_storages, "FERRY rpc: a tensor names storage ", key,
                    " of ", num_storages);
        return SegmentAsDataPtr(received.TakeTensor(static_cast<uint32_t>(index)));
      },
      /*device=*/c10::nullopt);
  std::vector<at::Tensor> tensors;
  for (const at::Tensor& t : unpickler.parse_ivalue().toTensorList())
    tensors.push_back(t);
  return c10::make_intrusive<Message>(std::move(payload), std::move(tensors),
                                      static_cast<MessageType>(h.type));
}

}  // namespace ferry_torch
