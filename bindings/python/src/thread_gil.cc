// ferry_py::FerryThreadGil (thread_gil.h).
#include "thread_gil.h"

namespace py = pybind11;

namespace ferry_py {
namespace {

bool InterpreterFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// One per thread that took the GIL through FerryThreadGil: the extra
// reference that keeps the thread's state alive between acquisitions,
// dropped when the thread exits.
struct ThreadStatePin {
  bool pinned = false;
  ~ThreadStatePin() {
    // A thread outliving the interpreter leaves its state to the
    // interpreter's own teardown: thread states may not be deleted then.
    if (!pinned || !Py_IsInitialized() || InterpreterFinalizing()) return;
    py::gil_scoped_acquire gil;
    gil.dec_ref();  // gil's own release now deletes the thread state
  }
};

thread_local ThreadStatePin pin;

}  // namespace

FerryThreadGil::FerryThreadGil() {
  if (!pin.pinned) {
    gil_.inc_ref();
    pin.pinned = true;
  }
}

}  // namespace ferry_py
