// ferry_py::Dispatcher: the one thread that runs Python work on behalf of
// ferry's own threads.
//
// ferry calls back on its threads (a future's continuation, a membership
// event, a tensor's deleter once the bytes have left) and those callbacks
// must not block: taking the GIL can wait a whole switch interval behind a
// busy Python thread, and a progress thread stuck there stalls every peer's
// heartbeats. So those callbacks only queue work here; this thread takes the
// GIL and runs it, in the order posted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ferry_py {

class Dispatcher {
 public:
  static Dispatcher& Get();

  // Queues `fn` to run with the GIL held. Callable from any thread, with or
  // without the GIL; never blocks on Python. After Stop(), `fn` is dropped
  // unrun (the interpreter is going away) and false is returned.
  bool Post(std::function<void()> fn);

  // Runs what is queued, then joins the thread. Called with the GIL held
  // (at interpreter exit); releases it while joining.
  void Stop();

 private:
  Dispatcher();
  void Main();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ferry_py
