// DLPack in and out of Python (tensors.h).
#include "tensors.h"

#include <pybind11/numpy.h>

#include <cstring>
#include <memory>
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
  PyObject* held = nullptr;   // TensorHoldingObject's object
  PyObject* owner = nullptr;  // the object __dlpack__ was called on, or null
  std::vector<int64_t> shape;
};

// Frees what an Exported keeps; needs the GIL.
void DropExported(Exported* e) {
  if (e->inner != nullptr && e->inner->deleter != nullptr) e->inner->deleter(e->inner);
  if (e->has_view) PyBuffer_Release(&e->view);
  Py_XDECREF(e->held);
  Py_XDECREF(e->owner);
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

std::string Tuple(const int64_t* v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += (i > 0 ? ", " : "") + std::to_string(v[i]);
  return s + (n == 1 ? ",)" : ")");
}

// Row-major without gaps (strides NULL, or what NULL would mean; a
// dimension of size 1 may have any stride).
bool IsCompact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return true;  // no elements
  }
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// Refuses a device tensor ferry cannot send as it is.
void CheckDeviceTensor(const DLTensor& t) {
  if (t.device.device_type != kDLCUDA) {
    throw py::value_error("ferry: cannot send a tensor on DLPack device type " +
                          std::to_string(t.device.device_type) +
                          ": ferry carries host memory and CUDA device memory (kDLCUDA); "
                          "copy it to one of those first");
  }
  if (!IsCompact(t)) {
    throw py::value_error(
        "ferry: cannot send a non-contiguous CUDA tensor (shape " +
        Tuple(t.shape, t.ndim) + ", strides " + Tuple(t.strides, t.ndim) +
        " in elements): ferry never copies device memory to make it contiguous; "
        "call .contiguous() on it (torch; cupy.ascontiguousarray() for CuPy) "
        "and send that");
  }
}

}  // namespace

bool IsHostMemory(DLDevice d) {
  return d.device_type == kDLCPU || d.device_type == kDLCUDAHost;
}

DLManagedTensor* TensorFromCapsule(py::handle capsule, py::handle owner) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    throw py::type_error(
        "ferry: expected a 'dltensor' capsule from __dlpack__() "
        "(a used capsule cannot be sent twice)");
  }
  auto* inner =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  // Checked before the capsule is used: refused, it stays the producer's.
  const bool device = !IsHostMemory(inner->dl_tensor.device);
  if (device) CheckDeviceTensor(inner->dl_tensor);
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0)
    throw py::error_already_set();
  Exported* e = NewExported();
  e->inner = inner;
  e->outer.dl_tensor = inner->dl_tensor;
  // Compact, checked above: say so the way ferry.h asks.
  if (device) e->outer.dl_tensor.strides = nullptr;
  if (owner) e->owner = owner.inc_ref().ptr();
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

namespace {

std::string DtypeName(DLDataType t) {
  std::string name;
  switch (t.code) {
    case kDLInt:
      name = "int";
      break;
    case kDLUInt:
      name = "uint";
      break;
    case kDLFloat:
      name = "float";
      break;
    case kDLBfloat:
      name = "bfloat";
      break;
    case kDLComplex:
      name = "complex";
      break;
    case 6:  // kDLBool (DLPack 0.8)
      name = "bool";
      break;
    default:
      name = "code" + std::to_string(t.code) + "_";
  }
  name += std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

class DeviceTensor {
 public:
  explicit DeviceTensor(DLManagedTensor* t)
      : t_(t),
        device_(t->dl_tensor.device),
        dtype_(t->dl_tensor.dtype),
        shape_(t->dl_tensor.shape, t->dl_tensor.shape + t->dl_tensor.ndim) {}
  ~DeviceTensor() {
    if (t_ == nullptr) return;
    DLManagedTensor* t = t_;
    t_ = nullptr;
    py::gil_scoped_release nogil;  // ferry's deleter may wait on the device
    FreeTensor(t);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  // DLPack's __dlpack__: hands the tensor over, once. The bytes are
  // complete and visible to every stream, so `stream` (the consumer's)
  // needs no wait; it is only checked. Always the unversioned capsule
  // (consumers asking max_version >= 1 accept it, as the protocol says).
  py::capsule DLPack(py::object stream, py::object max_version, py::object dl_device,
                     py::object copy) {
    if (!stream.is_none() && !py::isinstance<py::int_>(stream)) {
      throw py::type_error("ferry: __dlpack__(stream=...) takes an int or None");
    }
    if (!dl_device.is_none() && !Device().equal(py::tuple(dl_device))) {
      throw py::buffer_error("ferry: this tensor is on " + Describe() +
                             "; it cannot be exported to another device");
    }
    if (!copy.is_none() && copy.cast<bool>()) {
      throw py::buffer_error(
          "ferry: a received device tensor is exported without a copy only");
    }
    (void)max_version;
    if (t_ == nullptr) {
      throw py::buffer_error(
          "ferry: this received device tensor was exported already "
          "(DLPack hands a tensor over once)");
    }
    DLManagedTensor* t = t_;
    t_ = nullptr;
    return CapsuleFromTensor(t);
  }
  py::tuple Device() const {
    return py::make_tuple(static_cast<int>(device_.device_type), device_.device_id);
  }
  py::tuple Shape() const {
    py::tuple s(shape_.size());
    for (size_t i = 0; i < shape_.size(); ++i) s[i] = shape_[i];
    return s;
  }
  std::string Dtype() const { return DtypeName(dtype_); }
  uint64_t Nbytes() const {
    uint64_t n = (static_cast<uint64_t>(dtype_.bits) * dtype_.lanes + 7) / 8;
    for (int64_t d : shape_) n *= static_cast<uint64_t>(d);
    return n;
  }
  bool Exported() const { return t_ == nullptr; }
  std::string Describe() const {
    return (device_.device_type == kDLCUDA
                ? std::string("cuda")
                : "device_type " + std::to_string(device_.device_type)) +
           ":" + std::to_string(device_.device_id);
  }
  std::string Repr() const {
    return "ferry.DeviceTensor(" + Describe() + ", " + Dtype() +
           ", shape=" + Tuple(shape_.data(), static_cast<int>(shape_.size())) +
           (Exported() ? ", exported)" : ")");
  }

 private:
  DLManagedTensor* t_;
  DLDevice device_;
  DLDataType dtype_;
  std::vector<int64_t> shape_;
};

}  // namespace

py::object DeviceTensorFromTensor(DLManagedTensor* t) {
  std::unique_ptr<DeviceTensor> d;
  try {
    d = std::make_unique<DeviceTensor>(t);
  } catch (...) {
    FreeTensor(t);
    throw;
  }
  return py::cast(std::move(d));
}

void BindTensors(py::module_& m) {
  py::class_<DeviceTensor>(m, "DeviceTensor",
                           "A received tensor in device memory, as a DLPack producer "
                           "(torch.from_dlpack, cupy.from_dlpack take it, once).")
      .def("__dlpack__", &DeviceTensor::DLPack, py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("__dlpack_device__", &DeviceTensor::Device)
      .def_property_readonly("device", &DeviceTensor::Device)
      .def_property_readonly("shape", &DeviceTensor::Shape)
      .def_property_readonly("dtype", &DeviceTensor::Dtype)
      .def_property_readonly("nbytes", &DeviceTensor::Nbytes)
      .def_property_readonly("exported", &DeviceTensor::Exported)
      .def("__repr__", &DeviceTensor::Repr);
}

}  // namespace ferry_py
