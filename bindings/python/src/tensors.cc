// DLPack in and out of Python (tensors.h).
#include "tensors.h"

#include <pybind11/numpy.h>

#include <cstring>
#include <string>
#include <vector>

#include "dispatcher.h"

namespace ferry_py {

namespace {

// What ferry holds for a tensor exported from Python: the DLManagedTensor
// ferry sees (`outer`) and whatever keeps the data alive.
struct Exported {
  DLManagedTensor outer{};
  DLManagedTensor* inner = nullptr;  // from __dlpack__, or null
  Py_buffer view{};                  // from the buffer fallback
  bool has_view = false;
  PyObject* held = nullptr;  // TensorHoldingObject's object
  std::vector<int64_t> shape;
};

// Frees what an Exported keeps; needs the GIL.
void DropExported(Exported* e) {
  if (e->inner != nullptr && e->inner->deleter != nullptr) e->inner->deleter(e->inner);
  if (e->has_view) PyBuffer_Release(&e->view);
  Py_XDECREF(e->held);
  delete e;
}

void ExportedDeleter(DLManagedTensor* self) {
  auto* e = static_cast<Exported*>(self->manager_ctx);
  if (Py_IsInitialized() && PyGILState_Check()) {
    DropExported(e);
    return;
  }
  // A ferry thread: let the Python thread free it. After interpreter exit
  // began there is no Python left to free it into: leak, never crash.
  Dispatcher::Get().Post([e] { DropExported(e); });
}

Exported* NewExported() {
  auto* e = new Exported();
  e->outer.manager_ctx = e;
  e->outer.deleter = ExportedDeleter;
  return e;
}

// The dtype a Python buffer's struct-module format describes.
DLDataType DtypeFromFormat(const std::string& format, py::ssize_t itemsize) {
  std::string f = format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f = f.substr(1);
  if (!f.empty() && (f[0] == '>' || f[0] == '!')) {
    throw py::type_error(
        "ferry: a big-endian array cannot be sent as a tensor; "
        "convert it with .astype(dtype.newbyteorder('='))");
  }
  DLDataType t{};
  t.lanes = 1;
  t.bits = static_cast<uint8_t>(itemsize * 8);
  if (f == "?" || f == "B" || f == "H" || f == "I" || f == "L" || f == "Q") {
    t.code = kDLUInt;
  } else if (f == "b" || f == "h" || f == "i" || f == "l" || f == "q") {
    t.code = kDLInt;
  } else if (f == "e" || f == "f" || f == "d") {
    t.code = kDLFloat;
  } else if (f == "Zf" || f == "Zd") {
    t.code = kDLComplex;
  } else {
    throw py::type_error("ferry: cannot send an array of format '" + format +
                         "' as a tensor (numbers and bool only); pickle it instead");
  }
  return t;
}

std::string NumpyDtypeName(DLDataType t) {
  if (t.lanes != 1) {
    throw py::type_error("ferry: a vector dtype (lanes=" + std::to_string(t.lanes) +
                         ") has no numpy equivalent; receive it as torch");
  }
  const std::string bytes = std::to_string(t.bits / 8);
  switch (t.code) {
    case kDLInt:
      return "i" + bytes;
    case kDLUInt:
      return "u" + bytes;
    case kDLFloat:
      return "f" + bytes;
    case kDLComplex:
      return "c" + bytes;
    default:
      throw py::type_error("ferry: a tensor of DLPack type code " +
                           std::to_string(t.code) +
                           " (bfloat16?) has no numpy equivalent; receive it as torch");
  }
}

py::array MakeNumpy(const DLTensor& t, py::handle base) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    throw py::type_error(
        "ferry: a tensor in device memory cannot become a numpy array; "
        "receive it as torch");
  }
  py::dtype dtype(NumpyDtypeName(t.dtype));
  std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim);
  std::vector<py::ssize_t> strides(t.ndim);
  const py::ssize_t item = t.dtype.bits / 8;
  py::ssize_t step = item;
  for (int i = t.ndim - 1; i >= 0; --i) {
    strides[i] = t.strides != nullptr ? t.strides[i] * item : step;
    step *= shape[i];
  }
  char* data = static_cast<char*>(t.data) + t.byte_offset;
  return py::array(dtype, shape, strides, data, base);
}

}  // namespace

DLManagedTensor* TensorFromCapsule(py::handle capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    throw py::type_error(
        "ferry: expected a 'dltensor' capsule from __dlpack__() "
        "(a used capsule cannot be sent twice)");
  }
  auto* inner =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0)
    throw py::error_already_set();
  Exported* e = NewExported();
  e->inner = inner;
  e->outer.dl_tensor = inner->dl_tensor;
  return &e->outer;
}

DLManagedTensor* TensorFromBuffer(py::handle buffer) {
  Exported* e = NewExported();
  if (PyObject_GetBuffer(buffer.ptr(), &e->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) !=
      0) {
    delete e;
    PyErr_Clear();
    throw py::type_error(
        "ferry: this object is neither a DLPack exporter nor a C-contiguous "
        "buffer; pass a numpy array or a torch tensor");
  }
  e->has_view = true;
  try {
    DLTensor& t = e->outer.dl_tensor;
    t.dtype = DtypeFromFormat(e->view.format != nullptr ? e->view.format : "B",
                              e->view.itemsize);
    t.data = e->view.buf;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = e->view.ndim;
    e->shape.assign(e->view.shape, e->view.shape + e->view.ndim);
    t.shape = e->shape.data();
    t.strides = nullptr;  // C-contiguous, as requested above
  } catch (...) {
    DropExported(e);
    throw;
  }
  return &e->outer;
}

namespace {
// The holder's element type: a dtype no real tensor of ours uses, so a stray
// holder (a C user fetching a Python-owned value) is obviously not data.
constexpr DLDataType kHolderType{kDLOpaqueHandle, 8, 1};
}  // namespace

DLManagedTensor* TensorHoldingObject(py::handle value) {
  Exported* e = NewExported();
  e->held = value.inc_ref().ptr();
  e->shape = {0};
  DLTensor& t = e->outer.dl_tensor;
  t.data = e->held;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = kHolderType;
  t.shape = e->shape.data();
  return &e->outer;
}

py::object HeldObject(const DLTensor& t) {
  if (t.dtype.code != kHolderType.code || t.ndim != 1 || t.shape[0] != 0 ||
      t.data == nullptr) {
    throw py::value_error("ferry: this RRef's value was not made by Python");
  }
  return py::reinterpret_borrow<py::object>(static_cast<PyObject*>(t.data));
}

void FreeTensor(DLManagedTensor* t) {
  if (t != nullptr && t->deleter != nullptr) t->deleter(t);
}

py::object NumpyFromTensor(DLManagedTensor* t) {
  py::capsule owner(t, [](void* p) { FreeTensor(static_cast<DLManagedTensor*>(p)); });
  return MakeNumpy(t->dl_tensor, owner);
}

py::object NumpyView(const DLTensor& t, py::handle base) {
  return MakeNumpy(t, base);
}

py::capsule CapsuleFromTensor(DLManagedTensor* t) {
  // The DLPack protocol: a consumer renames the capsule "used_dltensor" and
  // takes ownership; an unconsumed capsule frees the tensor itself.
  PyObject* cap = PyCapsule_New(t, "dltensor", [](PyObject* self) {
    if (PyCapsule_IsValid(self, "dltensor")) {
      FreeTensor(static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, "dltensor")));
    }
  });
  if (cap == nullptr) {
    FreeTensor(t);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

}  // namespace ferry_py
