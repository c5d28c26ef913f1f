// Device memory for the DEV-* requirements, shared by the tests and the
// device peer process (built only where the CUDA toolkit's headers are:
// FERRY_HAVE_CUDA). Two sources, kept apart on purpose:
//   MemoryServices  the plugin's own mem_alloc / mem_free / mem_copy, called
//                   through its vtable: what the requirements measure;
//   the driver      (ferry_support/cuda_driver.h, opened at run time) for
//                   what a plugin does not offer: a current context,
//                   streams, memsets, an application's cuMemAlloc.
// The memory services go through ferry::Transport (MemAlloc, MemFree,
// MemCopy), exactly as the core calls them: presence-checked and guarded.
#pragma once

#include "common/status.h"
#include "transport/transport.h"

#include <ferry/transport.h>
#include <ferry_support/cuda_driver.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace ferry::conformance {

constexpr ferry_device_t kCuda0{FERRY_DEVICE_CUDA, 0};
constexpr ferry_device_t kHostDevice{FERRY_DEVICE_CPU, 0};

// The driver, with device 0's primary context current on the calling
// thread (retained once per process). nullptr when there is no usable GPU;
// *why then says why, in the driver's words.
const ferry_cuda::Driver* CurrentGpu(std::string* why);

// "" when r is CUDA_SUCCESS, else "<call>: CUDA error 2 (out of memory)".
std::string CuError(CUresult r, const std::string& call);

inline CUdeviceptr DevPtr(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

// A context's memory services (ABI 0.2 vtable entries), and which of them
// it offers.
class MemoryServices {
 public:
  explicit MemoryServices(Transport* t) : t_(t) {}

  bool has_alloc() const;
  bool has_free() const;
  bool has_copy() const;
  bool offered() const { return has_alloc() && has_free() && has_copy(); }
  // The entries missing, "mem_free, mem_copy"; "" when all three are there.
  std::string Missing() const;

  // Transport::MemAlloc; *out is NULL after a failure.
  Status Alloc(ferry_device_t device, uint64_t length, void** out) const;
  void Free(ferry_device_t device, void* data) const { t_->MemFree(device, data); }
  Status Copy(void* dst, ferry_device_t dst_device, const void* src,
              ferry_device_t src_device, uint64_t length, uint64_t src_stream) const {
    return t_->MemCopy(dst, dst_device, src, src_device, length, src_stream);
  }

 private:
  Transport* t_;
};

// `length` bytes on cuda:0, freed on destruction. From the plugin's
// mem_alloc (kPlugin, when offered), or from cuMemAlloc (kDriver: what an
// application's allocator hands the plugin).
class DeviceBuffer {
 public:
  enum class From { kPlugin, kDriver };
  static std::unique_ptr<DeviceBuffer> Allocate(const MemoryServices* mem,
                                                uint64_t length, From from,
                                                std::string* error);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  From from() const { return from_; }

 private:
  DeviceBuffer() = default;
  const MemoryServices* mem_ = nullptr;
  unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
  From from_ = From::kPlugin;
};

// Host <-> device copies of `length` bytes, synchronous: through the
// plugin's mem_copy when it offers it, through the driver otherwise. ""
// on success, else what failed.
std::string ToDevice(const MemoryServices& mem, void* device_dst, const void* host_src,
                     uint64_t length);
std::string ToHost(const MemoryServices& mem, void* host_dst, const void* device_src,
                   uint64_t length);

// A non-blocking stream (CU_STREAM_NON_BLOCKING: it does not wait for the
// legacy default stream, so nothing orders a plugin's copy after its work
// by accident) whose work can be held back. Hold() queues a host function
// that waits until Release(): everything queued after it stays pending for
// as long as the test likes, so a plugin that reads without waiting for
// the stream reads the old bytes every time, not only when a race goes
// badly. The gate opens by itself after 5 s, so a plugin that blocks the
// host until the stream drains costs 5 s and a failure, never a hang.
class ProducerStream {
 public:
  explicit ProducerStream(const ferry_cuda::Driver* cu);
  ~ProducerStream();  // Release(), synchronise, destroy
  ProducerStream(const ProducerStream&) = delete;
  ProducerStream& operator=(const ProducerStream&) = delete;

  CUstream stream() const { return stream_; }
  // The stream as a ferry_segment_t::stream / mem_copy src_stream value.
  uint64_t handle() const {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(stream_));
  }
  // "" when the stream was created.
  const std::string& error() const { return error_; }

  // False when the driver lacks cuLaunchHostFunc (nothing is held then).
  bool Hold();
  void Release();
  // True when the gate had to open by itself (nobody released it in 5 s).
  bool opened_by_itself() const;

 private:
  static void CUDA_CB Gate(void* self);

  const ferry_cuda::Driver* cu_;
  CUstream stream_ = nullptr;
  std::string error_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  bool opened_by_itself_ = false;
};

// The check of a received segment, named in the message header by the
// sender (so the receiver needs no copy of the bytes):
//   'p' <seed>   the testkit pattern FillPattern(seed)
//   'c' <hex>    every 32-bit word equals this value (DEV-3's memsets)
// Returns "" when `bytes` match, else where they first differ.
std::string CheckBytes(const unsigned char* bytes, uint64_t length, char kind,
                       uint64_t value);

}  // namespace ferry::conformance
