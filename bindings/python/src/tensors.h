// DLPack in and out of Python, without copying tensor data.
//
// Out: a tensor leaves Python as a DLManagedTensor that ferry takes and
// frees once the bytes have left. Its deleter may run on any ferry thread,
// and the exporter's own deleter (numpy 1.24's, for one) touches Python
// objects without taking the GIL; so every exported tensor is wrapped in a
// deleter that runs the original one with the GIL held (at once if this
// thread has it, else through the Dispatcher).
//
// In: a received DLManagedTensor becomes a writable numpy array over the
// received bytes, or a "dltensor" capsule that torch.from_dlpack consumes.
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

namespace ferry_py {

namespace py = pybind11;

// Takes the tensor out of a "dltensor" capsule (from obj.__dlpack__()),
// marking the capsule used as the DLPack protocol asks. Throws TypeError
// for anything else.
DLManagedTensor* TensorFromCapsule(py::handle capsule);

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

}  // namespace ferry_py
