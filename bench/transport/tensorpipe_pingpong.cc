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
// Set in the sequence number of a streamed message: the echoing side reads
// it into its ring of buffers instead of writing it back.
constexpr uint64_t kStreamFlag = 1ull << 62;

// What the callbacks (on TensorPipe's loop thread) report to the thread
// that waits: counters that only grow. Shared with every callback, so one
// that fires after the ping-pong object is gone (an error on close) finds it
// still alive.
//
// In sleep mode a callback wakes the waiter only when the counter it waits
// on reaches its target: every needless wake-up would put the waiting
// thread on the CPU that TensorPipe's reactor thread is spinning on.
class Completions {
 public:
  explicit Completions(PollMode mode) : mode_(mode) {}

  void Done(std::atomic<uint64_t>* counter) {
    if (mode_ == PollMode::kBusy) {
      counter->fetch_add(1, std::memory_order_release);
      return;
    }
    bool wake = false;
    {
      // Under the mutex, or the waiter could test, miss this, and sleep.
      std::lock_guard<std::mutex> lock(mutex_);
      const uint64_t now = counter->fetch_add(1, std::memory_order_release) + 1;
      wake = waiting_on_ == counter && now >= target_;
    }
    if (wake) cv_.notify_one();
  }

  void Fail(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error_.empty()) error_ = what;
      failed_.store(true, std::memory_order_release);
    }
    cv_.notify_one();
  }

  // Waits until *counter >= target; busy: spins with sched_yield
  // (TensorPipe's threads need this CPU to make the progress waited for),
  // counted as calls; sleep: condition variable, each sleep counted as a
  // wait. The timeout only bounds a lost callback.
  Status WaitAtLeast(std::atomic<uint64_t>* counter, uint64_t target,
                     LoopCounters* counters) {
    if (mode_ == PollMode::kBusy) {
      while (counter->load(std::memory_order_acquire) < target) {
        if (failed_.load(std::memory_order_acquire)) return Error();
        std::this_thread::yield();
        ++counters->calls;
      }
      return Status();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    waiting_on_ = counter;
    target_ = target;
    Status st;
    while (counter->load(std::memory_order_acquire) < target) {
      if (failed_.load(std::memory_order_acquire)) {
        st = Status(FERRY_UNKNOWN, "tensorpipe: " + error_);
        break;
      }
      ++counters->waits;
      if (cv_.wait_for(lock, std::chrono::seconds(30)) == std::cv_status::timeout) {
        st = Status(FERRY_DEADLINE_EXCEEDED, "tensorpipe: no callback within 30 s");
        break;
      }
    }
    waiting_on_ = nullptr;
    return st;
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
  const std::atomic<uint64_t>* waiting_on_ = nullptr;  // guarded by mutex_
  uint64_t target_ = 0;                                // guarded by mutex_
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

tp::Allocation OneTensorAt(uint8_t* dest, uint64_t size) {
  tp::Allocation allocation;
  if (size > 0) {
    tp::Allocation::Tensor t;
    t.buffer = tp::CpuBuffer{dest};
    allocation.tensors.push_back(std::move(t));
  }
  return allocation;
}

// The descriptor's shape, checked before anything is read: the benchmark's
// 16-byte header and at most one tensor of the length it announces.
bool ParseDescriptor(const tp::Descriptor& d, WireHeader* h, std::string* why) {
  if (d.metadata.size() != sizeof *h || d.tensors.size() > 1) {
    *why = "unexpected message: " + std::to_string(d.metadata.size()) +
           "-byte metadata, " + std::to_string(d.tensors.size()) + " tensors";
    return false;
  }
  std::memcpy(h, d.metadata.data(), sizeof *h);
  const uint64_t tensor = d.tensors.empty() ? 0 : d.tensors[0].length;
  if (tensor != h->length) {
    *why = "header says " + std::to_string(h->length) + " bytes, the tensor has " +
           std::to_string(tensor);
    return false;
  }
  return true;
}

void Write(const std::shared_ptr<tp::Pipe>& pipe,
           const std::shared_ptr<Completions>& done, uint64_t seq, uint8_t* data,
           uint64_t size) {
  pipe->write(MakeMessage(seq, data, size), [done](const tp::Error& error) {
    if (error) {
      done->Fail("write: " + error.what());
      return;
    }
    done->Done(&done->writes_done);
  });
}

// The client: posts each exchange from the calling thread; the read of the
// reply is chained in TensorPipe's callbacks (readDescriptor -> read).
class TensorPipeClient final : public PingPongClient {
 public:
  TensorPipeClient(std::unique_ptr<Endpoint> endpoint, PollMode mode, BufferSet* buffers)
      : endpoint_(std::move(endpoint)),
        buffers_(buffers),
        done_(std::make_shared<Completions>(mode)) {}

  Status RoundTrip(uint64_t size) override {
    const uint64_t seq = next_seq_++;
    const uint64_t reads = reads_posted_++;
    PostRead(buffers_->recv[0]->data(), size, seq);
    ++writes_posted_;
    Write(endpoint_->pipe, done_, seq, buffers_->send->data(), size);
    // Done when the echo is in place and the send buffer is free again.
    return WaitReadsAndWrites(reads + 1);
  }

  Status Stream(uint64_t size, uint32_t count, uint32_t window) override {
    for (uint32_t i = 0; i < count; ++i) {
      if (writes_posted_ >= window) {
        Status st = done_->WaitAtLeast(&done_->writes_done, writes_posted_ - window + 1,
                                       &counters_);
        if (!st.ok()) return st;
      }
      ++writes_posted_;
      Write(endpoint_->pipe, done_, kStreamFlag | next_seq_++, buffers_->send->data(),
            size);
    }
    const uint64_t reads = reads_posted_++;
    PostRead(nullptr, 0, kAckSeq);
    return WaitReadsAndWrites(reads + 1);
  }

  LoopCounters counters() const override { return counters_; }

 private:
  Status WaitReadsAndWrites(uint64_t reads) {
    Status st = done_->WaitAtLeast(&done_->reads_done, reads, &counters_);
    if (!st.ok()) return st;
    return done_->WaitAtLeast(&done_->writes_done, writes_posted_, &counters_);
  }

  void PostRead(uint8_t* dest, uint64_t size, uint64_t expect_seq) {
    std::shared_ptr<tp::Pipe> pipe = endpoint_->pipe;
    std::shared_ptr<Completions> done = done_;
    pipe->readDescriptor(
        [pipe, done, dest, size, expect_seq](const tp::Error& error, tp::Descriptor d) {
          if (error) {
            done->Fail("readDescriptor: " + error.what());
            return;
          }
          WireHeader h{};
          std::string why;
          if (!ParseDescriptor(d, &h, &why)) {
            done->Fail(why);
            return;
          }
          if (h.seq != expect_seq || h.length != size) {
            done->Fail("expected message #" + std::to_string(expect_seq) + " of " +
                       std::to_string(size) + " bytes, got #" + std::to_string(h.seq) +
                       " of " + std::to_string(h.length));
            return;
          }
          pipe->read(OneTensorAt(dest, size), [done](const tp::Error& e) {
            if (e) {
              done->Fail("read: " + e.what());
              return;
            }
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

// The echoing side runs entirely in TensorPipe's callbacks, the way
// TensorPipe's own benchmark_pipe serves: one readDescriptor is always
// posted; an echo request is read into recv[0] and written straight back
// from the read's callback, a streamed message is read into the next buffer
// of the ring, and either way the next readDescriptor is posted at once. The
// PingPongServer calls only wait for the counters, so no hop through the
// calling thread (which shares its CPU with TensorPipe's threads) lies on the
// round trip's path.
class TensorPipeServer final : public PingPongServer {
 public:
  TensorPipeServer(std::unique_ptr<Endpoint> endpoint, PollMode mode, BufferSet* buffers)
      : endpoint_(std::move(endpoint)),
        loop_(std::make_shared<Loop>(mode, buffers, endpoint_->pipe)) {
    PostNextRead(loop_);
  }

  ~TensorPipeServer() override {
    // Errors from closing the pipe (the standing readDescriptor) are not
    // failures of the benchmark.
    loop_->closing.store(true, std::memory_order_release);
  }

  // The callbacks echo every request as it comes; this only counts it, and
  // Flush waits for them all. Waiting here for each one would wake this
  // thread once per round trip, on the CPU the reactor needs. (The client
  // checks each echo's size and bytes.)
  Status Echo(uint64_t /*size*/) override {
    ++echoes_expected_;
    return Status();
  }

  Status StreamSink(uint64_t /*size*/, uint32_t count, uint32_t /*window*/) override {
    stream_expected_ += count;
    Status st = loop_->done.WaitAtLeast(&loop_->streamed, stream_expected_, &counters_);
    if (!st.ok()) return st;
    loop_->writes_posted.fetch_add(1, std::memory_order_relaxed);
    Write(loop_->pipe, loop_->done_ptr(), kAckSeq, nullptr, 0);
    return Status();
  }

  // Every echo counted by Echo has been read and its reply written, and
  // every write (echoes, acks) has completed.
  Status Flush() override {
    Status st = loop_->done.WaitAtLeast(&loop_->echoes, echoes_expected_, &counters_);
    if (!st.ok()) return st;
    return loop_->done.WaitAtLeast(&loop_->done.writes_done,
                                   loop_->writes_posted.load(std::memory_order_acquire),
                                   &counters_);
  }

 private:
  // What the callbacks share; kept alive by them.
  struct Loop : std::enable_shared_from_this<Loop> {
    Loop(PollMode mode, BufferSet* b, std::shared_ptr<tp::Pipe> p)
        : done_holder(std::make_shared<Completions>(mode)),
          done(*done_holder),
          buffers(b),
          pipe(std::move(p)) {}
    std::shared_ptr<Completions> done_ptr() { return done_holder; }

    std::shared_ptr<Completions> done_holder;
    Completions& done;
    BufferSet* buffers;
    std::shared_ptr<tp::Pipe> pipe;
    std::atomic<uint64_t> echoes{0};    // echo requests read and written back
    std::atomic<uint64_t> streamed{0};  // streamed messages read
    std::atomic<uint64_t> writes_posted{0};
    std::atomic<bool> closing{false};
  };

  static void PostNextRead(const std::shared_ptr<Loop>& loop) {
    loop->pipe->readDescriptor([loop](const tp::Error& error, tp::Descriptor d) {
      if (error) {
        if (!loop->closing.load(std::memory_order_acquire)) {
          loop->done.Fail("readDescriptor: " + error.what());
        }
        return;
      }
      WireHeader h{};
      std::string why;
      if (!ParseDescriptor(d, &h, &why)) {
        loop->done.Fail(why);
        return;
      }
      const bool stream = (h.seq & kStreamFlag) != 0;
      BufferSet* b = loop->buffers;
      uint8_t* dest =
          stream
              ? b->recv[loop->streamed.load(std::memory_order_relaxed) % b->recv.size()]
                    ->data()
              : b->recv[0]->data();
      if (h.length > b->recv[0]->size()) {
        loop->done.Fail("a " + std::to_string(h.length) +
                        "-byte message is larger than the buffers");
        return;
      }
      const uint64_t seq = h.seq, size = h.length;
      loop->pipe->read(OneTensorAt(dest, size), [loop, b, stream, dest, seq,
                                                 size](const tp::Error& e) {
        if (e) {
          if (!loop->closing.load(std::memory_order_acquire)) {
            loop->done.Fail("read: " + e.what());
          }
          return;
        }
        if (stream) {
          loop->done.Done(&loop->streamed);
        } else {
          loop->writes_posted.fetch_add(1, std::memory_order_relaxed);
          Write(loop->pipe, loop->done_ptr(), seq, b->reply->data(), size);
          loop->done.Done(&loop->echoes);
        }
        PostNextRead(loop);
      });
    });
  }

  std::unique_ptr<Endpoint> endpoint_;
  std::shared_ptr<Loop> loop_;
  uint64_t echoes_expected_ = 0;
  uint64_t stream_expected_ = 0;
  LoopCounters counters_;  // the waits; the client's are the ones reported
};

// --------------------------------------------------------------------------
// As a reference of the benchmark.
// --------------------------------------------------------------------------
const ReferenceInfo kTensorPipeInfo = {
    "tensorpipe", "TensorPipe shm",
    "TensorPipe (libtensorpipe 0.0~git20220513) Context with only the shm "
    "transport and the basic channel; Pipe::write of a Message with 16 "
    "bytes of metadata and one CPU tensor; the receiver's readDescriptor "
    "callback posts read() into the destination buffer; the echoing side "
    "runs entirely in TensorPipe's callbacks (an always-posted "
    "readDescriptor, the echo written back from the read's callback), as "
    "TensorPipe's benchmark_pipe does; the client's calling thread waits "
    "for its callbacks: busy: spin with sched_yield; sleep: condition "
    "variable. TensorPipe's shm reactor thread busy-polls in both modes. "
    "Measured in a pass of its own",
    /*isolated=*/true};

Status Caught(const char* what, const std::exception& e) {
  return Status(FERRY_UNKNOWN, std::string("tensorpipe: ") + what + ": " + e.what());
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
      return Status(FERRY_DEADLINE_EXCEEDED, "tensorpipe: no pipe accepted within " +
                                                 std::to_string(timeout_ms) + " ms");
    }
    if (!accepted->error.empty() || !accepted->pipe) {
      return Status(FERRY_UNKNOWN, "tensorpipe: accept: " + accepted->error);
    }
    endpoint_->pipe = accepted->pipe;
    return std::unique_ptr<PingPongServer>(
        new TensorPipeServer(std::move(endpoint_), mode_, buffers_));
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

  StatusOr<std::unique_ptr<ReferenceListener>> Listen(PollMode mode,
                                                      BufferSet* buffers) override {
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
  StatusOr<std::unique_ptr<PingPongClient>> Connect(const std::string& address,
                                                    PollMode mode,
                                                    BufferSet* buffers) override {
    try {
      auto endpoint = std::make_unique<Endpoint>();
      endpoint->context = MakeContext("bench-client");
      endpoint->pipe = endpoint->context->connect(address);
      return std::unique_ptr<PingPongClient>(
          new TensorPipeClient(std::move(endpoint), mode, buffers));
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
