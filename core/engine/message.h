// What the engine hands up and takes down: one core message with its body
// bytes and tensor payloads. OutMessage owns what it sends until the
// transport's SEND_DONE (tensor deleters run then, exactly once);
// InMessage owns what arrived until the agent takes it apart.
#pragma once

#include "common/status.h"
#include "wire/messages.h"

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

namespace ferry {

class DeviceMemory;

// A received segment's bytes, 64-byte aligned (tensors are handed to users
// as DLPack tensors, which libraries expect aligned); large ones come from
// the receive-buffer pool (receive_buffers.h). Or device memory from a
// worker's device allocator (OnDevice), freed into it.
struct AlignedBuffer {
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n);
  // `n` bytes on `device` from `memory`'s allocator (RESOURCE_EXHAUSTED
  // naming the size and device when it has none).
  static StatusOr<AlignedBuffer> OnDevice(std::shared_ptr<DeviceMemory> memory,
                                          DLDevice device, size_t n);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data(o.data), size(o.size), device(o.device), memory(std::move(o.memory)) {
    o.data = nullptr;
    o.size = 0;
    o.device = DLDevice{kDLCPU, 0};
  }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  void* data = nullptr;
  size_t size = 0;
  DLDevice device{kDLCPU, 0};
  // Set for device memory: the allocator it goes back to.
  std::shared_ptr<DeviceMemory> memory;

 private:
  void Release();
};

// A tensor to send: the caller's DLManagedTensor (its deleter runs once,
// after the bytes left), plus where its bytes are.
struct OutTensor {
  DLManagedTensor* managed = nullptr;  // owned: deleter called at the end
  const void* data = nullptr;
  uint64_t nbytes = 0;
  DLDevice device{};
  // Device memory: the stream its producer wrote it on (FERRY_STREAM_*).
  uint64_t stream = 0;
};

// Bytes a message to a peer adds to that peer's count of bytes queued and
// not yet written (Limits::max_queued_bytes_per_connection), given back when
// the message goes: sent, dropped with a closed connection, or never posted.
class QueuedCharge {
 public:
  QueuedCharge() = default;
  ~QueuedCharge() { Release(); }
  QueuedCharge(const QueuedCharge&) = delete;
  QueuedCharge& operator=(const QueuedCharge&) = delete;
  void Charge(std::shared_ptr<std::atomic<uint64_t>> counter, uint64_t bytes) {
    Release();
    counter_ = std::move(counter);
    bytes_ = bytes;
    counter_->fetch_add(bytes_, std::memory_order_relaxed);
  }
  bool charged() const { return counter_ != nullptr; }

 private:
  void Release() {
    if (counter_) counter_->fetch_sub(bytes_, std::memory_order_relaxed);
    counter_.reset();
  }
  std::shared_ptr<std::atomic<uint64_t>> counter_;
  uint64_t bytes_ = 0;
};

struct OutMessage {
  OutMessage() {
    frame.reserve(wire::Writer::kInitialCapacity);
    frame.resize(wire::kEnvelopeSize);
  }
  ~OutMessage();
  wire::Kind kind = wire::Kind::kHeartbeat;
  // Room for the envelope, then the body. The engine encodes the envelope
  // into that room when it sends, so the header it hands the transport is
  // this one buffer: a small message's bytes are written here once and
  // copied once more, by the plugin, on their way to the kernel.
  std::vector<uint8_t> frame;
  // Appends to the body (after the envelope's room).
  wire::Writer BodyWriter() { return wire::Writer(&frame); }
  const uint8_t* body_data() const { return frame.data() + wire::kEnvelopeSize; }
  size_t body_size() const { return frame.size() - wire::kEnvelopeSize; }
  std::vector<OutTensor> tensors;
  // Host copies of device tensors staged for a peer no device transport
  // reaches (members.cc): the tensors' segments point here.
  std::vector<AlignedBuffer> staged;
  // Keeps borrowed bytes (an owner's value being fetched) alive until sent.
  std::shared_ptr<void> keepalive;
  // Set while the destination is not known yet: encodes body and tensors
  // for destination `to` (the agent's, for calls to workers not yet joined).
  std::function<Status(uint64_t to, OutMessage* self, std::vector<wire::RRefRef>* forks)>
      deferred;
  // Set by the engine when sent: the body travels as segment 0, not in
  // the header (it is larger than the transport's header limit).
  bool body_in_segment0 = false;
  // Header and payload bytes: body, envelope and every tensor.
  uint64_t total_bytes() const {
    uint64_t n = frame.size();
    for (const auto& t : tensors) n += t.nbytes;
    return n;
  }
  // Counted against its peer's queued bytes until it is destroyed.
  QueuedCharge queued;
  // The engine's list of sends posted and not yet completed (intrusive: a
  // message in flight costs no allocation of its own).
  OutMessage* in_flight_prev = nullptr;
  OutMessage* in_flight_next = nullptr;
};

// Sends posted to a transport and not completed yet. Not thread-safe (the
// engine's lock guards it); owns nothing until DeleteAll().
class InFlightSends {
 public:
  bool empty() const { return head_ == nullptr; }
  void Insert(OutMessage* m) {
    m->in_flight_prev = nullptr;
    m->in_flight_next = head_;
    if (head_ != nullptr) head_->in_flight_prev = m;
    head_ = m;
  }
  void Erase(OutMessage* m) {
    if (m->in_flight_prev != nullptr) {
      m->in_flight_prev->in_flight_next = m->in_flight_next;
    } else {
      head_ = m->in_flight_next;
    }
    if (m->in_flight_next != nullptr)
      m->in_flight_next->in_flight_prev = m->in_flight_prev;
    m->in_flight_prev = m->in_flight_next = nullptr;
  }
  // After the transport is finalised: the sends that never completed.
  void DeleteAll() {
    while (head_ != nullptr) {
      OutMessage* m = head_;
      head_ = m->in_flight_next;
      delete m;
    }
  }

 private:
  OutMessage* head_ = nullptr;
};

// Where a message came from.
struct PeerKey {
  uint64_t id = 0;
  uint64_t incarnation = 0;
};

struct InMessage {
  wire::Envelope envelope;
  PeerKey from;  // set by the engine when it delivers the message
  std::vector<uint8_t> body;
  std::vector<AlignedBuffer> segments;  // tensor payloads, in order
  // Set when a segment that arrived in device memory could not get device
  // memory here (it landed in host memory instead): the message's call
  // fails with it.
  Status device_error;
};

}  // namespace ferry
