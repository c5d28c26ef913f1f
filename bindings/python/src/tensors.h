// DLPack in and out of Python, without copying tensor data.
//
// Out: a tensor leaves Python as a DLManagedTensor that ferry takes and
// frees once the bytes have left. Its deleter may run on any ferry thread,
// and the exporter's own deleter (numpy 1.24's, for one) touches Python
// objects without taking the GIL; so every exported tensor is wrapped in a
// deleter that runs the original one with the GIL held (at once if this
// thread has it, else through the Dispatcher).
//
// Device memory (kDLCUDA) goes out the same way: the producer exported it
// with __dlpack__(stream=1) (ferry/_pickling.py), so its pending work is
// ordered before the legacy default stream, and the payload says so
// (FERRY_STREAM_LEGACY). It must be compact: ferry never copies device
// memory to make it so.
//
// In: a received DLManagedTensor becomes a writable numpy array over the
// received bytes, or a "dltensor" capsule that torch.from_dlpack consumes;
// one in device memory becomes a DeviceTensor, which any DLPack consumer
// (torch.from_dlpack, cupy.from_dlpack, jax.dlpack) takes without a copy.
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

namespace ferry_py {

namespace py = pybind11;

// True for memory the host can read directly (kDLCPU, kDLCUDAHost).
bool IsHostMemory(DLDevice d);

// Takes the tensor out of a "dltensor" capsule (from obj.__dlpack__()),
// marking the capsule used as the DLPack protocol asks; `owner` (the
// exporting object, may be null) is kept alive until ferry frees the
// tensor. Throws TypeError for anything else, and ValueError, leaving the
// capsule unused, for a device tensor ferry cannot send as it is (not
// compact, or on a device other than CUDA).
DLManagedTensor* TensorFromCapsule(py::handle capsule, py::handle owner = py::handle());

// The fallback for exporters that refuse DLPack (numpy 1.24 refuses
// read-only and bool arrays): a C-contiguous buffer, kept alive (not
// copied) until ferry is done with it. Bool arrives as uint8; the Python
// layer records the dtype and restores it.
DLManagedTensor* TensorFromBuffer(py::handle buffer);

// A zero-size tensor whose data pointer is `value` itself, holding a
// reference to it until ferry frees the tensor: how a live Python object
// becomes an RRef's value on its owner (the value stays the object, not a
// pickled copy, so the owner mutates it in place). See HeldObject.
DLManagedTensor* TensorHoldingObject(py::handle value);
// The object a TensorHoldingObject tensor holds (borrowed from it).
py::object HeldObject(const DLTensor& t);

// Runs a DLManagedTensor's deleter (for one ferry never took).
void FreeTensor(DLManagedTensor* t);

// A writable numpy array over the tensor's bytes; the array owns `t`.
py::object NumpyFromTensor(DLManagedTensor* t);
// A numpy view of a tensor someone else owns (an RRef's value on its
// owner); `base` keeps the owner alive.
py::object NumpyView(const DLTensor& t, py::handle base);
// A "dltensor" capsule owning `t` (torch.utils.dlpack.from_dlpack takes it).
py::capsule CapsuleFromTensor(DLManagedTensor* t);

// A received tensor in device memory, as a DLPack producer: __dlpack__()
// hands the tensor over once (a "dltensor" capsule whose deleter is
// ferry's), __dlpack_device__() says where it is. Its bytes are complete
// and visible to every stream when it arrives, so a consumer's stream
// needs no wait. Freed by ferry's deleter if nobody takes it.
py::object DeviceTensorFromTensor(DLManagedTensor* t);

// Adds the DeviceTensor class to the module.
void BindTensors(py::module_& m);

}  // namespace ferry_py
