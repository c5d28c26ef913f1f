// ferry_py::Dispatcher (dispatcher.h).
#include "dispatcher.h"

#include "thread_gil.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace ferry_py {

Dispatcher& Dispatcher::Get() {
  // Leaked on purpose: it must outlive every ferry thread that may post,
  // including ones still winding down during interpreter exit.
  static Dispatcher* d = new Dispatcher();
  return *d;
}

Dispatcher::Dispatcher() : thread_([this] { Main(); }) {}

bool Dispatcher::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return true;
}

void Dispatcher::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_one();
  py::gil_scoped_release release;  // Main() needs the GIL to drain
  thread_.join();
}

void Dispatcher::Main() {
  while (true) {
    std::deque<std::function<void()>> batch;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and drained
      batch.swap(queue_);
    }
    FerryThreadGil gil;
    for (auto& fn : batch) {
      try {
        fn();
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("ferry callback");
      } catch (const std::exception& e) {
        PyErr_WarnEx(PyExc_RuntimeWarning, e.what(), 1);
      }
    }
  }
}

}  // namespace ferry_py
