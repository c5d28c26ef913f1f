// ferry::DeviceMemory: a worker's device memory services. Where received
// device tensors are allocated (the application's allocator from the worker
// options, else the device transport's mem_alloc/mem_free) and how device
// bytes cross to and from host memory (the device transport's mem_copy,
// used to stage a message through host memory for a peer no device
// transport reaches, and to place a staged tensor back into device memory
// at the receiver).
//
// Thread-safe; shared by the engine and by every buffer it allocated, so a
// received device tensor freed after its worker stopped still frees into
// the allocator it came from, exactly once (the device transport's context
// stays open until the last such buffer is gone).
#pragma once

#include "common/status.h"
#include "transport/transport.h"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ferry {

// The application's allocator (ferry_device_allocator_t, ferry.h).
struct AppDeviceAllocator {
  void* user_data = nullptr;
  void* (*alloc)(void* user_data, ferry_device_t device, uint64_t length) = nullptr;
  void (*free)(void* user_data, ferry_device_t device, void* data,
               uint64_t length) = nullptr;
};

class DeviceMemory {
 public:
  // `transport`: a transport with device memory services (may be NULL);
  // `app`: the application's allocator (may be NULL).
  DeviceMemory(std::shared_ptr<Transport> transport, const AppDeviceAllocator* app);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Device bytes can be copied to and from host memory (staging).
  bool can_copy() const { return transport_ != nullptr; }
  // Device memory can be allocated for received tensors.
  bool can_alloc() const { return app_set_ || transport_ != nullptr; }
  // The transport whose services these are ("" when none).
  std::string transport_name() const;
  bool uses_app_allocator() const { return app_set_; }

  // `length` bytes on `device` (nullptr for 0 bytes). RESOURCE_EXHAUSTED,
  // naming the size and device, when the allocator has none.
  StatusOr<void*> Alloc(DLDevice device, uint64_t length);
  // Gives back what Alloc(device, length) returned. nullptr is a no-op.
  void Free(DLDevice device, void* data, uint64_t length);
  // A synchronous copy, after the work on `src_stream` (FERRY_STREAM_*).
  Status Copy(void* dst, DLDevice dst_device, const void* src, DLDevice src_device,
              uint64_t length, uint64_t src_stream);

  // "cuda:0", "cpu", ...
  static std::string DeviceName(DLDevice device);

 private:
  std::shared_ptr<Transport> transport_;
  bool app_set_ = false;
  AppDeviceAllocator app_;
};

}  // namespace ferry
