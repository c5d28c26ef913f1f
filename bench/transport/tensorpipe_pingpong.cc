#include "transport/tensorpipe_pingpong.h"

#include <tensorpipe/tensorpipe.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace ferry::bench {
namespace {

namespace tp = tensorpipe;

// The message's metadata: the benchmark's 16-byte header, as ferry sends it.
struct WireHeader {
  uint64_t seq;
  uint64_t length;
};
constexpr uint64_t kAckSeq = ~0ull;

// What the callbacks (on TensorPipe's loop thread) report to the thread
// that waits. Shared with every callback, so one that fires after the ping-
// pong object is gone (an error on close) finds it still alive.
class Completions {
 public:
  explicit Completions(PollMode mode) : mode_(mode) {}

  void Done(std::atomic<uint64_t>* counter) {
    if (mode_ == PollMode::kBusy) {
      counter->fetch_add(1, std::memory_order_release);
      return;
    }
    {
      // Under the mutex, or the waiter could test, miss this, and sleep.
      std::lock_guard<std::mutex> lock(mutex_);
      counter->fetch_add(1, std::memory_order_release);
    }
    cv_.notify_one();
  }

  void Fail(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error_.empty()) error_ = what;
      failed_.store(true, std::memory_order_release);
    }
    cv_.notify_one();
  }

  // Waits until `ready()`; busy: spins with sched_yield (TensorPipe's loop
  // and reactor threads need this CPU to make the progress waited for),
  // counted as calls; sleep: condition variable, each sleep counted as a
  // wait. The timeout only bounds a lost callback.
  template <typename Ready>
  Status Wait(Ready ready, LoopCounters* counters) {
    if (mode_ == PollMode::kBusy) {
      while (!ready()) {
        if (failed_.load(std::memory_order_acquire)) return Error();
        std::this_thread::yield();
        ++counters->calls;
      }
      return Status();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    while (!ready()) {
      if (failed_.load(std::memory_order_acquire)) {
        lock.unlock();
        return Error();
      }
      ++counters->waits;
      if (cv_.wait_for(lock, std::chrono::seconds(30)) ==
          std::cv_status::timeout) {
        return Status(FERRY_DEADLINE_EXCEEDED,
                      "tensorpipe: no callback within 30 s");
      }
    }
    return Status();
  }

  Status Error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return Status(FERRY_UNKNOWN, "tensorpipe: " + error_);
  }

  std::atomic<uint64_t> reads_done{0};
  std::atomic<uint64_t> writes_done{0};

 private:
  const PollMode mode_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> failed_{false};
  std::string error_;
};

std::shared_ptr<tp::Context> MakeContext(const std::string& name) {
  auto context = std::make_shared<tp::Context>(tp::ContextOptions().name(name));
  context->registerTransport(0, "shm", tp::transport::shm::create());
  context->registerChannel(0, "basic", tp::channel::basic::create());
  return context;
}

tp::Message MakeMessage(uint64_t seq, uint8_t* data, uint64_t size) {
  tp::Message m;
  const WireHeader h{seq, size};
  m.metadata.assign(reinterpret_cast<const char*>(&h), sizeof h);
  if (size > 0) {
    tp::Message::Tensor t;
    t.buffer = tp::CpuBuffer{data};
    t.length = size;
    m.tensors.push_back(std::move(t));
  }
  return m;
}

// Owns a context, and the listener on the peer's side, for as long as the
// pipe lives (a pipe may use its listener's connections), and closes and
// joins them in the right order.
struct Endpoint {
  std::shared_ptr<tp::Context> context;
  std::shared_ptr<tp::Listener> listener;
  std::shared_ptr<tp::Pipe> pipe;

  ~Endpoint() {
    if (pipe) pipe->close();
    if (listener) listener->close();
    if (context) {
      context->close();
      context->join();  // stops TensorPipe's threads, including the reactor
    }
  }
};

class TensorPipePingPong final : public PingPongClient, public PingPongServer {
 public:
  TensorPipePingPong(std::unique_ptr<Endpoint> endpoint, PollMode mode,
                     BufferSet* buffers)
      : endpoint_(std::move(endpoint)),
        buffers_(buffers),
        done_(std::make_shared<Completions>(mode)) {}

  Status RoundTrip(uint64_t size) override {
    const uint64_t seq = next_seq_++;
    const uint64_t reads = reads_posted_++;
    PostRead(buffers_->recv[0]->data(), size, seq, /*echo=*/false);
    PostWrite(seq, buffers_->send->data(), size);
    // Done when the echo is in place and the send buffer is free again.
    return done_->Wait(
        [&] {
          return done_->reads_done.load(std::memory_order_acquire) > reads &&
                 done_->writes_done.load(std::memory_order_acquire) ==
                     writes_posted_;
        },
        &counters_);
  }

  Status Echo(uint64_t size) override {
    // recv[0] is lent to the previous echo's write until it completes.
    Status st = Flush();
    if (!st.ok()) return st;
    const uint64_t reads = reads_posted_++;
    ++writes_posted_;  // the read's callback posts the echo
    PostRead(buffers_->recv[0]->data(), size, kAnySeq, /*echo=*/true);
    return done_->Wait(
        [&] {
          return done_->reads_done.load(std::memory_order_acquire) > reads;
        },
        &counters_);
  }

  Status Stream(uint64_t size, uint32_t count, uint32_t window) override {
    for (uint32_t i = 0; i < count; ++i) {
      Status st = done_->Wait(
          [&] {
            return writes_posted_ -
                       done_->writes_done.load(std::memory_order_acquire) <
                   window;
          },
          &counters_);
      if (!st.ok()) return st;
      PostWrite(next_seq_++, buffers_->send->data(), size);
    }
    Status st = Flush();
    if (!st.ok()) return st;
    const uint64_t reads = reads_posted_++;
    PostRead(nullptr, 0, kAckSeq, /*echo=*/false);
    return done_->Wait(
        [&] {
          return done_->reads_done.load(std::memory_order_acquire) > reads;
        },
        &counters_);
  }

  Status StreamSink(uint64_t size, uint32_t count, uint32_t window) override {
    const uint32_t ring = static_cast<uint32_t>(
        std::min<size_t>(window, buffers_->recv.size()));
    Status st = Flush();  // recv[0] may still be lent to an echo
    const uint64_t base = reads_posted_;
    for (uint32_t i = 0; st.ok() && i < count; ++i) {
      // Slot i % ring is free once the read `ring` messages back landed.
      st = done_->Wait(
          [&] {
            return i < ring ||
                   done_->reads_done.load(std::memory_order_acquire) >=
                       base + i - ring + 1;
          },
          &counters_);
      if (!st.ok()) break;
      ++reads_posted_;
      PostRead(buffers_->recv[i % ring]->data(), size, kAnySeq,
               /*echo=*/false);
    }
    if (st.ok()) {
      st = done_->Wait(
          [&] {
            return done_->reads_done.load(std::memory_order_acquire) ==
                   reads_posted_;
          },
          &counters_);
    }
    if (!st.ok()) return st;
    PostWrite(kAckSeq, nullptr, 0);
    return Status();
  }

  Status Flush() override {
    return done_->Wait(
        [&] {
          return done_->writes_done.load(std::memory_order_acquire) ==
                 writes_posted_;
        },
        &counters_);
  }

  LoopCounters counters() const override { return counters_; }

 private:
  static constexpr uint64_t kAnySeq = ~0ull - 1;

  void PostWrite(uint64_t seq, uint8_t* data, uint64_t size) {
    ++writes_posted_;
    WriteFromCallback(endpoint_->pipe, done_, seq, data, size);
  }

  // Also called on TensorPipe's loop thread (echo): touches no member.
  static void WriteFromCallback(const std::shared_ptr<tp::Pipe>& pipe,
                                const std::shared_ptr<Completions>& done,
                                uint64_t seq, uint8_t* data, uint64_t size) {
    pipe->write(MakeMessage(seq, data, size), [done](const tp::Error& error) {
      if (error) {
        done->Fail("write: " + error.what());
        return;
      }
      done->Done(&done->writes_done);
    });
  }

  // readDescriptor, then read into `dest` from the descriptor's callback;
  // with `echo`, the read's callback writes the bytes straight back.
  void PostRead(uint8_t* dest, uint64_t size, uint64_t expect_seq, bool echo) {
    std::shared_ptr<tp::Pipe> pipe = endpoint_->pipe;
    std::shared_ptr<Completions> done = done_;
    pipe->readDescriptor([pipe, done, dest, size, expect_seq, echo](
                             const tp::Error& error, tp::Descriptor d) {
      if (error) {
        done->Fail("readDescriptor: " + error.what());
        return;
      }
      WireHeader h{};
      const size_t expected_tensors = size > 0 ? 1 : 0;
      if (d.metadata.size() != sizeof h || d.tensors.size() != expected_tensors ||
          (size > 0 && d.tensors[0].length != size)) {
        done->Fail("unexpected message: " + std::to_string(d.tensors.size()) +
                   " tensors, expected a " + std::to_string(size) +
                   "-byte one");
        return;
      }
      std::memcpy(&h, d.metadata.data(), sizeof h);
      if ((expect_seq != kAnySeq && h.seq != expect_seq) || h.length != size) {
        done->Fail("expected message #" + std::to_string(expect_seq) +
                   " of " + std::to_string(size) + " bytes, got #" +
                   std::to_string(h.seq) + " of " + std::to_string(h.length));
        return;
      }
      tp::Allocation allocation;
      if (size > 0) {
        tp::Allocation::Tensor t;
        t.buffer = tp::CpuBuffer{dest};
        allocation.tensors.push_back(std::move(t));
      }
      const uint64_t seq = h.seq;
      pipe->read(std::move(allocation),
                 [pipe, done, dest, size, seq, echo](const tp::Error& e) {
                   if (e) {
                     done->Fail("read: " + e.what());
                     return;
                   }
                   if (echo) WriteFromCallback(pipe, done, seq, dest, size);
                   done->Done(&done->reads_done);
                 });
    });
  }

  std::unique_ptr<Endpoint> endpoint_;
  BufferSet* buffers_;
  std::shared_ptr<Completions> done_;
  uint64_t next_seq_ = 0;
  uint64_t reads_posted_ = 0;
  uint64_t writes_posted_ = 0;
  LoopCounters counters_;
};

// --------------------------------------------------------------------------
// As a reference of the benchmark.
// --------------------------------------------------------------------------
const ReferenceInfo kTensorPipeInfo = {
    "tensorpipe", "TensorPipe shm",
    "TensorPipe (libtensorpipe 0.0~git20220513) Context with only the shm "
    "transport and the basic channel; Pipe::write of a Message with 16 "
    "bytes of metadata and one CPU tensor; the receiver's readDescriptor "
    "callback posts read() into the destination buffer, and the echoing "
    "side writes back from the read's callback (TensorPipe's loop thread); "
    "the calling thread waits for the callbacks: busy: spin with "
    "sched_yield; sleep: condition variable. TensorPipe's shm reactor "
    "thread busy-polls in both modes. Measured in a pass of its own",
    /*isolated=*/true};

Status Caught(const char* what, const std::exception& e) {
  return Status(FERRY_UNKNOWN, std::string("tensorpipe: ") + what + ": " +
                                   e.what());
}

class TensorPipeListener final : public ReferenceListener {
 public:
  TensorPipeListener(std::unique_ptr<Endpoint> endpoint, PollMode mode,
                     BufferSet* buffers)
      : endpoint_(std::move(endpoint)), mode_(mode), buffers_(buffers) {
    address_ = endpoint_->listener->url("shm");
  }

  std::string address() const override { return address_; }

  StatusOr<std::unique_ptr<PingPongServer>> Accept(int timeout_ms) override {
    struct Accepted {
      std::mutex mutex;
      std::condition_variable cv;
      bool done = false;
      std::string error;
      std::shared_ptr<tp::Pipe> pipe;
    };
    auto accepted = std::make_shared<Accepted>();
    endpoint_->listener->accept(
        [accepted](const tp::Error& error, std::shared_ptr<tp::Pipe> pipe) {
          std::lock_guard<std::mutex> lock(accepted->mutex);
          if (error) accepted->error = error.what();
          accepted->pipe = std::move(pipe);
          accepted->done = true;
          accepted->cv.notify_one();
        });
    std::unique_lock<std::mutex> lock(accepted->mutex);
    if (!accepted->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                               [&] { return accepted->done; })) {
      return Status(FERRY_DEADLINE_EXCEEDED,
                    "tensorpipe: no pipe accepted within " +
                        std::to_string(timeout_ms) + " ms");
    }
    if (!accepted->error.empty() || !accepted->pipe) {
      return Status(FERRY_UNKNOWN, "tensorpipe: accept: " + accepted->error);
    }
    endpoint_->pipe = accepted->pipe;
    return std::unique_ptr<PingPongServer>(
        new TensorPipePingPong(std::move(endpoint_), mode_, buffers_));
  }

 private:
  std::unique_ptr<Endpoint> endpoint_;
  std::string address_;
  PollMode mode_;
  BufferSet* buffers_;
};

class TensorPipeShmReference final : public Reference {
 public:
  const ReferenceInfo& info() const override { return kTensorPipeInfo; }

  StatusOr<std::unique_ptr<ReferenceListener>> Listen(
      PollMode mode, BufferSet* buffers) override {
    try {
      auto endpoint = std::make_unique<Endpoint>();
      endpoint->context = MakeContext("bench-peer");
      // An empty name: the kernel picks a free abstract socket address.
      endpoint->listener = endpoint->context->listen({"shm://"});
      return std::unique_ptr<ReferenceListener>(
          new TensorPipeListener(std::move(endpoint), mode, buffers));
    } catch (const std::exception& e) {
      return Caught("listen", e);
    }
  }

  // Context::connect returns at once; the pipe finishes connecting in
  // TensorPipe's threads, and the first write waits for it.
  StatusOr<std::unique_ptr<PingPongClient>> Connect(
      const std::string& address, PollMode mode,
      BufferSet* buffers) override {
    try {
      auto endpoint = std::make_unique<Endpoint>();
      endpoint->context = MakeContext("bench-client");
      endpoint->pipe = endpoint->context->connect(address);
      return std::unique_ptr<PingPongClient>(
          new TensorPipePingPong(std::move(endpoint), mode, buffers));
    } catch (const std::exception& e) {
      return Caught("connect", e);
    }
  }
};

}  // namespace

std::unique_ptr<Reference> MakeTensorPipeShmReference() {
  return std::make_unique<TensorPipeShmReference>();
}

}  // namespace ferry::bench
