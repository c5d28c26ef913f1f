// message_codec: a torch RPC Message as a ferry payload and back.
//
// torch's agents move a Message (type, payload bytes, tensors) between
// workers; ferry moves bytes plus DLPack tensor segments. The bytes carry
// the type, torch's payload and a pickle of the tensors' metadata (sizes,
// strides, offsets, which storage), written by torch's own jit pickler as
// TensorPipe's agent does, so that views and tensors sharing a storage
// arrive as views of one storage. Each storage travels as its own segment
// (a 1-D uint8 DLPack tensor over its bytes), never pickled: on arrival a
// storage wraps the segment ferry placed, without a copy.
#pragma once

#include <torch/csrc/distributed/rpc/message.h>

#include <ferry/ferry.hpp>

#include <string>
#include <vector>

namespace ferry_torch {

// A Message ready to send: the bytes and, taken by ferry once sent, one
// tensor per storage. The DLPack tensors keep their storages alive until
// ferry runs their deleters. Throws c10::Error for a tensor that is not on
// the CPU (Debian's torch 1.13 has no CUDA; device maps are not offered).
ferry::Payload EncodeMessage(const torch::distributed::rpc::Message& message);

// The Message a payload carries: takes its tensors out of `received`.
// Throws c10::Error when the bytes are not an encoded Message.
c10::intrusive_ptr<torch::distributed::rpc::Message> DecodeMessage(
    ferry::Message& received);

}  // namespace ferry_torch
