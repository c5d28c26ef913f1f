#include "device.h"

#include "ferry_plugin/log.h"

#include <strings.h>

#include <cstring>

namespace ferry_cuda_ipc {

CUstream StreamOf(uint64_t stream) {
  if (stream == FERRY_STREAM_LEGACY) return CU_STREAM_LEGACY;
  if (stream == FERRY_STREAM_PER_THREAD) return CU_STREAM_PER_THREAD;
  return reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
}

namespace {

// Size classes: powers of two from 512 B to 1 MiB, then multiples of 2 MiB
// (the driver's own granularity for large allocations).
uint64_t SizeClass(uint64_t n) {
  constexpr uint64_t kSmall = uint64_t{1} << 20;
  constexpr uint64_t kLarge = uint64_t{2} << 20;
  if (n > kSmall) return (n + kLarge - 1) / kLarge * kLarge;
  uint64_t c = 512;
  while (c < n) c <<= 1;
  return c;
}

}  // namespace

Status Gpu::Open(std::unique_ptr<Gpu>* out) {
  std::string why;
  const ferry_cuda::Driver* cu = ferry_cuda::Driver::Get(&why);
  if (cu == nullptr) return Error(FERRY_UNAVAILABLE, "cuda_ipc: %s", why.c_str());
  std::unique_ptr<Gpu> gpu(new Gpu(cu));
  for (int i = 0; i < cu->devices; ++i) {
    CUresult r = cu->cuDeviceGet(&gpu->devs_[static_cast<size_t>(i)].cudev, i);
    if (r != CUDA_SUCCESS) {
      return Error(FERRY_UNAVAILABLE, "cuda_ipc: %s", gpu->Err("cuDeviceGet", r).c_str());
    }
  }
  *out = std::move(gpu);
  return Status();
}

Gpu::Gpu(const ferry_cuda::Driver* cu)
    : cu_(cu), devs_(static_cast<size_t>(cu->devices)) {}

Gpu::~Gpu() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < devs_.size(); ++i) {
    Dev& d = devs_[i];
    if (d.ctx == nullptr) continue;
    cu_->cuCtxSetCurrent(d.ctx);
    for (CUstream s : {d.copy, d.send, d.memcpy_stream}) {
      if (s != nullptr) {
        cu_->cuStreamSynchronize(s);
        cu_->cuStreamDestroy(s);
      }
    }
    for (CUevent e : d.events) cu_->cuEventDestroy(e);
    DropCachedLocked(d);
    // Blocks the host still holds are not freed under it: it must have
    // given them back before fini (transport.h); say so if it did not.
    if (!d.live.empty()) {
      FERRY_PLUGIN_LOG(FERRY_LOG_WARN,
                       "fini: %zu device buffers from mem_alloc on device %zu were "
                       "never given back with mem_free; they stay allocated",
                       d.live.size(), i);
    }
    cu_->cuDevicePrimaryCtxRelease(d.cudev);
  }
  cu_->cuCtxSetCurrent(nullptr);
}

std::string Gpu::Err(const char* what, CUresult r) const {
  return std::string(what) + ": " + cu_->ErrorText(r);
}

Status Gpu::UseLocked(int dev) {
  if (!valid(dev)) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "cuda_ipc: no CUDA device %d (this process sees %d)", dev,
                 device_count());
  }
  Dev& d = devs_[static_cast<size_t>(dev)];
  CUresult r;
  if (d.ctx == nullptr) {
    if ((r = cu_->cuDevicePrimaryCtxRetain(&d.ctx, d.cudev)) != CUDA_SUCCESS) {
      d.ctx = nullptr;
      return Error(FERRY_UNAVAILABLE, "cuda_ipc: %s",
                   Err("cuDevicePrimaryCtxRetain", r).c_str());
    }
  }
  CUcontext cur = nullptr;
  if (cu_->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != d.ctx) {
    if ((r = cu_->cuCtxSetCurrent(d.ctx)) != CUDA_SUCCESS) {
      return Error(FERRY_INTERNAL, "cuda_ipc: %s", Err("cuCtxSetCurrent", r).c_str());
    }
  }
  return Status();
}

Status Gpu::Use(int dev) {
  std::lock_guard<std::mutex> lock(mu_);
  return UseLocked(dev);
}

Status Gpu::NewStream(int dev, CUstream* slot, CUstream* out) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st = UseLocked(dev);
  if (!st.ok()) return st;
  if (*slot == nullptr) {
    CUresult r = cu_->cuStreamCreate(slot, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) {
      *slot = nullptr;
      return Error(FERRY_INTERNAL, "cuda_ipc: %s", Err("cuStreamCreate", r).c_str());
    }
  }
  *out = *slot;
  return Status();
}

Status Gpu::CopyStream(int dev, CUstream* out) {
  if (!valid(dev)) return UseLocked(dev);  // the message
  return NewStream(dev, &devs_[static_cast<size_t>(dev)].copy, out);
}

Status Gpu::SendStream(int dev, CUstream* out) {
  if (!valid(dev)) return UseLocked(dev);
  return NewStream(dev, &devs_[static_cast<size_t>(dev)].send, out);
}

Status Gpu::TakeEvent(int dev, CUevent* out) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st = UseLocked(dev);
  if (!st.ok()) return st;
  Dev& d = devs_[static_cast<size_t>(dev)];
  if (!d.events.empty()) {
    *out = d.events.back();
    d.events.pop_back();
    return Status();
  }
  CUresult r = cu_->cuEventCreate(out, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    return Error(FERRY_INTERNAL, "cuda_ipc: %s", Err("cuEventCreate", r).c_str());
  }
  return Status();
}

void Gpu::GiveEvent(int dev, CUevent ev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (valid(dev)) devs_[static_cast<size_t>(dev)].events.push_back(ev);
}

std::string Gpu::BusId(int dev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!valid(dev)) return "";
  Dev& d = devs_[static_cast<size_t>(dev)];
  if (d.bus_id.empty()) {
    char buf[32] = {0};
    if (cu_->cuDeviceGetPCIBusId(buf, sizeof buf, d.cudev) == CUDA_SUCCESS)
      d.bus_id = buf;
  }
  return d.bus_id;
}

int Gpu::OrdinalOfBus(const std::string& bus_id) {
  if (bus_id.empty()) return -1;
  for (int i = 0; i < device_count(); ++i) {
    if (strcasecmp(BusId(i).c_str(), bus_id.c_str()) == 0) return i;
  }
  return -1;
}

void Gpu::DropCachedLocked(Dev& d) {
  for (auto& [size, blocks] : d.free_blocks) {
    for (Dev::FreeBlock& b : blocks) {
      AwaitReleasedLocked(d, b);
      cu_->cuMemFree(b.ptr);
      d.cached_bytes -= size;
    }
  }
  d.free_blocks.clear();
}

Status Gpu::AwaitReleasedLocked(Dev& d, Dev::FreeBlock& b) {
  if (b.released == nullptr) return Status();
  CUresult r = cu_->cuEventQuery(b.released);
  if (r == CUDA_ERROR_NOT_READY) r = cu_->cuEventSynchronize(b.released);
  d.events.push_back(b.released);
  b.released = nullptr;
  if (r != CUDA_SUCCESS) {
    return Error(FERRY_INTERNAL, "cuda_ipc: %s",
                 Err("waiting for the work on a freed buffer", r).c_str());
  }
  return Status();
}

Status Gpu::Alloc(int dev, uint64_t length, void** out) {
  if (length == 0 || out == nullptr) {
    return Error(FERRY_INVALID_ARGUMENT, "cuda_ipc: mem_alloc() needs a length > 0");
  }
  if (length > (uint64_t{1} << 48)) {  // beyond any GPU (and SizeClass's range)
    return Error(FERRY_RESOURCE_EXHAUSTED,
                 "cuda_ipc: mem_alloc() of %llu bytes: more than any GPU holds",
                 static_cast<unsigned long long>(length));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Status st = UseLocked(dev);
  if (!st.ok()) return st;
  Dev& d = devs_[static_cast<size_t>(dev)];
  const uint64_t size = SizeClass(length);
  auto it = d.free_blocks.find(size);
  if (it != d.free_blocks.end() && !it->second.empty()) {
    Dev::FreeBlock b = it->second.back();
    it->second.pop_back();
    d.cached_bytes -= size;
    const CUdeviceptr p = b.ptr;
    st = AwaitReleasedLocked(d, b);
    if (!st.ok()) {
      cu_->cuMemFree(p);  // not known to be idle: never handed out again
      return st;
    }
    d.live[p] = size;
    *out = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
    return Status();
  }
  CUdeviceptr p = 0;
  CUresult r = cu_->cuMemAlloc(&p, size);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && d.cached_bytes > 0) {
    // The pool's free blocks hold the memory: give them back and retry.
    DropCachedLocked(d);
    r = cu_->cuMemAlloc(&p, size);
  }
  if (r != CUDA_SUCCESS) {
    return Error(
        r == CUDA_ERROR_OUT_OF_MEMORY ? FERRY_RESOURCE_EXHAUSTED : FERRY_INTERNAL,
        "cuda_ipc: %s (%llu bytes on device %d)", Err("cuMemAlloc", r).c_str(),
        static_cast<unsigned long long>(size), dev);
  }
  d.live[p] = size;
  *out = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  return Status();
}

bool Gpu::Free(int dev, void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!valid(dev) || ptr == nullptr) return false;
  Dev& d = devs_[static_cast<size_t>(dev)];
  const CUdeviceptr p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr));
  auto it = d.live.find(p);
  if (it == d.live.end()) return false;
  Dev::FreeBlock b;
  b.ptr = p;
  // Ordered after the work already queued on the legacy default stream (and,
  // through it, on the context's blocking streams). Without an event (none
  // could be made), the block waits for the whole device instead.
  if (UseLocked(dev).ok()) {
    if (!d.events.empty()) {
      b.released = d.events.back();
      d.events.pop_back();
    } else if (cu_->cuEventCreate(&b.released, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      b.released = nullptr;
    }
    if (b.released != nullptr &&
        cu_->cuEventRecord(b.released, CU_STREAM_LEGACY) != CUDA_SUCCESS) {
      d.events.push_back(b.released);
      b.released = nullptr;
    }
  }
  if (b.released == nullptr) cu_->cuCtxSynchronize();
  d.free_blocks[it->second].push_back(b);
  d.cached_bytes += it->second;
  d.live.erase(it);
  return true;
}

Status Gpu::Copy(void* dst, const void* src, uint64_t length, int dev,
                 uint64_t src_stream) {
  if (length == 0) return Status();
  if (dev < 0) {
    std::memcpy(dst, src, length);
    return Status();
  }
  CUstream stream = nullptr;
  Status st = NewStream(dev, &devs_[static_cast<size_t>(dev)].memcpy_stream, &stream);
  if (!st.ok()) return st;
  CUevent ev = nullptr;
  if (src_stream != FERRY_STREAM_READY) {
    if (!(st = TakeEvent(dev, &ev)).ok()) return st;
  }
  std::lock_guard<std::mutex> copy_lock(*devs_[static_cast<size_t>(dev)].copy_mu);
  CUresult r = CUDA_SUCCESS;
  const char* what = "";
  if (ev != nullptr) {
    // Ordered after the producer's work without waiting for the rest of
    // its stream: an event recorded there, waited for on ours.
    what = "cuEventRecord on the source stream";
    r = cu_->cuEventRecord(ev, StreamOf(src_stream));
    if (r == CUDA_SUCCESS) {
      what = "cuStreamWaitEvent";
      r = cu_->cuStreamWaitEvent(stream, ev, 0);
    }
  }
  if (r == CUDA_SUCCESS) {
    what = "cuMemcpyAsync";
    r = cu_->cuMemcpyAsync(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(dst)),
                           static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(src)),
                           length, stream);
  }
  if (r == CUDA_SUCCESS) {
    what = "cuStreamSynchronize";
    r = cu_->cuStreamSynchronize(stream);
  }
  if (ev != nullptr) GiveEvent(dev, ev);
  if (r != CUDA_SUCCESS) {
    return Error(FERRY_INTERNAL, "cuda_ipc: mem_copy: %s", Err(what, r).c_str());
  }
  return Status();
}

}  // namespace ferry_cuda_ipc
