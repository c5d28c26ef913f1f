#include "harness/device.h"

#include "testkit/pattern.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace ferry::conformance {

const ferry_cuda::Driver* CurrentGpu(std::string* why) {
  std::string reason;
  const ferry_cuda::Driver* cu = ferry_cuda::Driver::Get(&reason);
  if (cu == nullptr) {
    if (why != nullptr) *why = reason;
    return nullptr;
  }
  // The primary context, retained once and kept for the process's life
  // (what a framework does; the plugin retains its own reference).
  static std::once_flag once;
  static CUcontext primary = nullptr;
  static std::string retain_error;
  std::call_once(once, [&] {
    CUdevice dev = 0;
    retain_error = CuError(cu->cuDeviceGet(&dev, 0), "cuDeviceGet(0)");
    if (retain_error.empty()) {
      retain_error = CuError(cu->cuDevicePrimaryCtxRetain(&primary, dev),
                             "cuDevicePrimaryCtxRetain");
    }
  });
  if (!retain_error.empty()) {
    if (why != nullptr) *why = retain_error;
    return nullptr;
  }
  std::string err = CuError(cu->cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  if (!err.empty()) {
    if (why != nullptr) *why = err;
    return nullptr;
  }
  return cu;
}

std::string CuError(CUresult r, const std::string& call) {
  if (r == CUDA_SUCCESS) return "";
  const ferry_cuda::Driver* cu = ferry_cuda::Driver::Get(nullptr);
  return call + ": " +
         (cu != nullptr ? cu->ErrorText(r)
                        : "CUDA error " + std::to_string(static_cast<int>(r)));
}

// ---------------------------------------------------------------------------
// MemoryServices

bool MemoryServices::has_alloc() const {
  return t_->Has(FERRY_VT(mem_alloc));
}
bool MemoryServices::has_free() const {
  return t_->Has(FERRY_VT(mem_free));
}
bool MemoryServices::has_copy() const {
  return t_->Has(FERRY_VT(mem_copy));
}

std::string MemoryServices::Missing() const {
  std::string out;
  auto add = [&](bool present, const char* name) {
    if (present) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  add(has_alloc(), "mem_alloc");
  add(has_free(), "mem_free");
  add(has_copy(), "mem_copy");
  return out;
}

Status MemoryServices::Alloc(ferry_device_t device, uint64_t length, void** out) const {
  StatusOr<void*> p = t_->MemAlloc(device, length);
  *out = p.ok() ? p.value() : nullptr;
  return p.status();
}

// ---------------------------------------------------------------------------
// DeviceBuffer

std::unique_ptr<DeviceBuffer> DeviceBuffer::Allocate(const MemoryServices* mem,
                                                     uint64_t length, From from,
                                                     std::string* error) {
  std::unique_ptr<DeviceBuffer> b(new DeviceBuffer());
  b->mem_ = mem;
  b->size_ = length;
  b->from_ = (from == From::kPlugin && mem->has_alloc() && mem->has_free())
                 ? From::kPlugin
                 : From::kDriver;
  if (b->from_ == From::kPlugin) {
    void* p = nullptr;
    Status s = mem->Alloc(kCuda0, length, &p);
    if (!s.ok() || p == nullptr) {
      *error = "mem_alloc(cuda:0, " + std::to_string(length) +
               "): " + (s.ok() ? "OK and a NULL pointer" : s.ToString());
      return nullptr;
    }
    b->data_ = static_cast<unsigned char*>(p);
    return b;
  }
  std::string why;
  const ferry_cuda::Driver* cu = CurrentGpu(&why);
  if (cu == nullptr) {
    *error = why;
    return nullptr;
  }
  CUdeviceptr p = 0;
  *error =
      CuError(cu->cuMemAlloc(&p, length), "cuMemAlloc(" + std::to_string(length) + ")");
  if (!error->empty()) return nullptr;
  b->data_ = reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(p));
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  if (from_ == From::kPlugin) {
    mem_->Free(kCuda0, data_);
  } else if (const ferry_cuda::Driver* cu = CurrentGpu(nullptr)) {
    cu->cuMemFree(DevPtr(data_));
  }
}

std::string ToDevice(const MemoryServices& mem, void* device_dst, const void* host_src,
                     uint64_t length) {
  if (mem.has_copy()) {
    Status s =
        mem.Copy(device_dst, kCuda0, host_src, kHostDevice, length, FERRY_STREAM_READY);
    return s.ok() ? "" : "mem_copy(host -> cuda:0): " + s.ToString();
  }
  std::string why;
  const ferry_cuda::Driver* cu = CurrentGpu(&why);
  if (cu == nullptr) return why;
  return CuError(cu->cuMemcpyHtoD(DevPtr(device_dst), host_src, length), "cuMemcpyHtoD");
}

std::string ToHost(const MemoryServices& mem, void* host_dst, const void* device_src,
                   uint64_t length) {
  if (mem.has_copy()) {
    Status s =
        mem.Copy(host_dst, kHostDevice, device_src, kCuda0, length, FERRY_STREAM_READY);
    return s.ok() ? "" : "mem_copy(cuda:0 -> host): " + s.ToString();
  }
  std::string why;
  const ferry_cuda::Driver* cu = CurrentGpu(&why);
  if (cu == nullptr) return why;
  return CuError(cu->cuMemcpyDtoH(host_dst, DevPtr(device_src), length), "cuMemcpyDtoH");
}

// ---------------------------------------------------------------------------
// ProducerStream

ProducerStream::ProducerStream(const ferry_cuda::Driver* cu) : cu_(cu) {
  error_ = CuError(cu_->cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING),
                   "cuStreamCreate(CU_STREAM_NON_BLOCKING)");
  if (!error_.empty()) stream_ = nullptr;
}

ProducerStream::~ProducerStream() {
  Release();
  if (stream_ != nullptr) {
    cu_->cuStreamSynchronize(stream_);
    cu_->cuStreamDestroy(stream_);
  }
}

bool ProducerStream::Hold() {
  // ferry_support's Driver does not list cuLaunchHostFunc: looked up here,
  // in the library the Driver already opened.
  using LaunchHostFunc = CUresult (*)(CUstream, CUhostFn, void*);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr || stream_ == nullptr) return false;
  auto launch = reinterpret_cast<LaunchHostFunc>(dlsym(lib, "cuLaunchHostFunc"));
  dlclose(lib);
  if (launch == nullptr) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  if (launch(stream_, &ProducerStream::Gate, this) != CUDA_SUCCESS) {
    Release();
    return false;
  }
  return true;
}

void ProducerStream::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = true;
  cv_.notify_all();
}

bool ProducerStream::opened_by_itself() const {
  std::lock_guard<std::mutex> lock(mu_);
  return opened_by_itself_;
}

// Runs on the driver's callback thread, so it makes no CUDA call.
void CUDA_CB ProducerStream::Gate(void* self) {
  auto* p = static_cast<ProducerStream*>(self);
  std::unique_lock<std::mutex> lock(p->mu_);
  if (!p->cv_.wait_for(lock, std::chrono::seconds(5), [p] { return p->open_; })) {
    p->open_ = true;
    p->opened_by_itself_ = true;
  }
}

// ---------------------------------------------------------------------------
// Checks

std::string CheckBytes(const unsigned char* bytes, uint64_t length, char kind,
                       uint64_t value) {
  if (kind == 'p') {
    int64_t at = testkit::PatternMismatch(bytes, length, value);
    if (at < 0) return "";
    return "first differs from pattern " + std::to_string(value) + " at byte " +
           std::to_string(at);
  }
  if (kind == 'c') {
    const auto word = static_cast<uint32_t>(value);
    uint64_t stale = 0, first = length;
    uint32_t first_value = 0;
    for (uint64_t i = 0; i + 4 <= length; i += 4) {
      uint32_t w;
      std::memcpy(&w, bytes + i, 4);
      if (w != word) {
        if (stale++ == 0) {
          first = i;
          first_value = w;
        }
      }
    }
    if (stale == 0) return "";
    char text[160];
    std::snprintf(text, sizeof text,
                  "%llu of %llu words are not the producer's final 0x%08x (first at byte "
                  "%llu: 0x%08x)",
                  static_cast<unsigned long long>(stale),
                  static_cast<unsigned long long>(length / 4), word,
                  static_cast<unsigned long long>(first), first_value);
    return text;
  }
  return std::string("unknown check '") + kind + "'";
}

}  // namespace ferry::conformance
