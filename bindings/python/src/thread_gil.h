// ferry_py::FerryThreadGil: the GIL, taken on one of ferry's own threads (a
// handler's executor thread, the dispatcher).
//
// pybind11's gil_scoped_acquire gives a thread that has no Python thread
// state a fresh one and deletes it again on release. Per call that would be
// a new PyThreadState, a new frame stack (Python 3.11 maps and unmaps it:
// page faults and a TLB flush every time) and empty threading.local()s,
// whose first lookup raises and formats an AttributeError: a large share of
// a small call's cost. ferry's threads live as long as their worker, so each
// keeps the thread state it was first given until it exits.
#pragma once

#include <pybind11/pybind11.h>

namespace ferry_py {

class FerryThreadGil {
 public:
  FerryThreadGil();
  FerryThreadGil(const FerryThreadGil&) = delete;
  FerryThreadGil& operator=(const FerryThreadGil&) = delete;

 private:
  pybind11::gil_scoped_acquire gil_;
};

}  // namespace ferry_py
