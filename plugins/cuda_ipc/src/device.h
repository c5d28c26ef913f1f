// A context's view of the CUDA driver: each device's primary context (made
// current on whichever thread calls in), the plugin's own streams, a pool of
// plain events for completions, the PCI bus ids that name a device across
// processes (ordinals differ under CUDA_VISIBLE_DEVICES), and the memory
// services the ABI offers (mem_alloc / mem_free / mem_copy).
//
// Threading: the memory services may be called from any thread at any time
// (transport.h), so everything here is guarded by one mutex, except the
// per-device copy lock that serialises mem_copy's stream (held across its
// synchronisation, so other callers never wait behind a long copy for
// the main mutex).
#pragma once

#include "status.h"

#include "ferry_support/cuda_driver.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry_cuda_ipc {

// The CUstream a ferry stream value names (FERRY_STREAM_LEGACY ->
// CU_STREAM_LEGACY, ...). Not for FERRY_STREAM_READY (nothing to wait for).
CUstream StreamOf(uint64_t stream);

class Gpu {
 public:
  // The process's driver; FERRY_UNAVAILABLE with Driver::Get's reason when
  // there is none.
  static Status Open(std::unique_ptr<Gpu>* out);
  ~Gpu();
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  const ferry_cuda::Driver& cu() const { return *cu_; }
  int device_count() const { return static_cast<int>(devs_.size()); }
  bool valid(int dev) const { return dev >= 0 && dev < device_count(); }

  // "cuMemAlloc: CUDA error 2 (out of memory)"
  std::string Err(const char* what, CUresult r) const;

  // Makes device `dev`'s primary context current on the calling thread
  // (retained on first use, released at destruction).
  Status Use(int dev);

  // The plugin's streams on `dev` (non-blocking: they never synchronise
  // with the legacy default stream), created on first use. Copy: the
  // receiver's placements. Send: bounce copies of segments whose producer
  // stream is FERRY_STREAM_READY.
  Status CopyStream(int dev, CUstream* out);
  Status SendStream(int dev, CUstream* out);
  // A plain (timing-disabled) event on `dev`, from a pool.
  Status TakeEvent(int dev, CUevent* out);
  void GiveEvent(int dev, CUevent ev);

  // The device's PCI bus id ("0000:3b:00.0"); "" if unknown.
  std::string BusId(int dev);
  // The local ordinal of the device with that bus id, or -1.
  int OrdinalOfBus(const std::string& bus_id);

  // --- memory services (thread-safe) --------------------------------------
  // From a caching pool per device and size class: cuMemFree synchronises
  // the whole device, so blocks go back to the pool, not the driver, until
  // destruction. Every block is a whole cuMemAlloc allocation, so it can be
  // exported with a legacy IPC handle (the bounce buffers use this).
  // A block given back is handed out again only once the work queued on the
  // legacy default stream when it was given back has finished (an event
  // recorded there by Free): a framework that read a received tensor on its
  // default stream and dropped it at once must not see the next arrival
  // overwrite it under its kernels.
  Status Alloc(int dev, uint64_t length, void** out);
  // False when `p` is not a live block of this pool on `dev`.
  bool Free(int dev, void* p);
  // Synchronous copy after the work submitted to src_stream; `dev` is the
  // device whose context runs it (either side's, -1 for host to host).
  Status Copy(void* dst, const void* src, uint64_t length, int dev, uint64_t src_stream);

 private:
  struct Dev {
    CUdevice cudev = 0;
    CUcontext ctx = nullptr;  // retained primary context, or null
    CUstream copy = nullptr;
    CUstream send = nullptr;
    CUstream memcpy_stream = nullptr;  // mem_copy's, under copy_mu
    std::vector<CUevent> events;
    struct FreeBlock {
      CUdeviceptr ptr = 0;
      CUevent released = nullptr;  // recorded on the legacy stream at Free
    };
    std::map<uint64_t, std::vector<FreeBlock>> free_blocks;  // by class
    std::unordered_map<CUdeviceptr, uint64_t> live;          // block -> class
    uint64_t cached_bytes = 0;
    std::string bus_id;
    std::unique_ptr<std::mutex> copy_mu{new std::mutex};
  };
  explicit Gpu(const ferry_cuda::Driver* cu);
  Status UseLocked(int dev);  // mu_ held
  Status NewStream(int dev, CUstream* slot, CUstream* out);
  void DropCachedLocked(Dev& d);  // cuMemFree every free block
  // Waits (rarely: the event is usually done) for the work that may still
  // read a freed block, then recycles its event. mu_ held.
  Status AwaitReleasedLocked(Dev& d, Dev::FreeBlock& b);

  const ferry_cuda::Driver* cu_;
  std::mutex mu_;
  std::vector<Dev> devs_;
};

}  // namespace ferry_cuda_ipc
