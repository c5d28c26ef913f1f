// The CUDA driver API, opened at run time.
//
// Everything in ferry that touches device memory (the cuda_ipc plugin, the
// conformance suite's device requirements, the CUDA benchmarks and probes)
// compiles against the toolkit's <cuda.h> for its types and constants, but
// never links libcuda: it dlopen()s libcuda.so.1 here. So those programs
// load on a machine with no NVIDIA driver and can say why they cannot run,
// and they use the driver of the machine they run on, whatever toolkit
// built them (the driver is backward compatible; the entry points named
// here exist since CUDA 11.3).
//
// Usage: `const ferry_cuda::Driver* cu = ferry_cuda::Driver::Get(&why);`
// then `cu->cuMemAlloc(&p, n)`. FERRY_CUDA_PROFILE=1 times every call
// (cuda_driver_profile.h). cuda.h's macros map the names to their
// versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the members below are
// declared through the same macros, so a call and its symbol always agree.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <string>

namespace ferry_cuda {

// X(name) for each driver entry point ferry uses.
#define FERRY_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                            \
  X(cuDriverGetVersion)                \
  X(cuGetErrorString)                  \
  X(cuDeviceGet)                       \
  X(cuDeviceGetCount)                  \
  X(cuDeviceGetName)                   \
  X(cuDeviceGetAttribute)              \
  X(cuDeviceGetPCIBusId)               \
  X(cuDevicePrimaryCtxRetain)          \
  X(cuDevicePrimaryCtxRelease)         \
  X(cuCtxSetCurrent)                   \
  X(cuCtxGetCurrent)                   \
  X(cuCtxGetDevice)                    \
  X(cuCtxSynchronize)                  \
  X(cuPointerGetAttribute)             \
  X(cuMemGetAddressRange)              \
  X(cuMemAlloc)                        \
  X(cuMemFree)                         \
  X(cuMemAllocHost)                    \
  X(cuMemFreeHost)                     \
  X(cuMemcpy)                          \
  X(cuMemcpyAsync)                     \
  X(cuMemcpyHtoD)                      \
  X(cuMemcpyDtoH)                      \
  X(cuMemcpyDtoD)                      \
  X(cuMemcpyDtoDAsync)                 \
  X(cuMemsetD8)                        \
  X(cuMemsetD8Async)                   \
  X(cuMemsetD32Async)                  \
  X(cuStreamCreate)                    \
  X(cuStreamDestroy)                   \
  X(cuStreamSynchronize)               \
  X(cuStreamWaitEvent)                 \
  X(cuStreamQuery)                     \
  X(cuEventCreate)                     \
  X(cuEventDestroy)                    \
  X(cuEventRecord)                     \
  X(cuEventQuery)                      \
  X(cuEventSynchronize)                \
  X(cuIpcGetMemHandle)                 \
  X(cuIpcOpenMemHandle)                \
  X(cuIpcCloseMemHandle)               \
  X(cuIpcGetEventHandle)               \
  X(cuIpcOpenEventHandle)              \
  X(cuMemGetAllocationGranularity)     \
  X(cuMemCreate)                       \
  X(cuMemRelease)                      \
  X(cuMemExportToShareableHandle)      \
  X(cuMemImportFromShareableHandle)    \
  X(cuMemAddressReserve)               \
  X(cuMemAddressFree)                  \
  X(cuMemMap)                          \
  X(cuMemUnmap)                        \
  X(cuMemSetAccess)

}  // namespace ferry_cuda

#include "ferry_support/cuda_driver_profile.h"  // uses the list above

namespace ferry_cuda {

// Expands a name first, so cuMemAlloc looks up "cuMemAlloc_v2".
#define FERRY_CUDA_STR2(x) #x
#define FERRY_CUDA_STR(x) FERRY_CUDA_STR2(x)

struct Driver {
#define FERRY_CUDA_MEMBER(fn) decltype(&::fn) fn = nullptr;
  FERRY_CUDA_DRIVER_FUNCTIONS(FERRY_CUDA_MEMBER)
#undef FERRY_CUDA_MEMBER
  int version = 0;  // cuDriverGetVersion: 13000 for CUDA 13.0
  int devices = 0;  // cuDeviceGetCount after cuInit

  // The process's driver, opened and initialised once (thread-safe). NULL
  // when there is none or it has no device; *why (may be NULL) then says
  // which, in words a user can act on.
  static const Driver* Get(std::string* why = nullptr) {
    static std::string reason;
    static const Driver* driver = Open(&reason);
    if (driver == nullptr && why != nullptr) *why = reason;
    return driver;
  }

  // "CUDA_ERROR_INVALID_VALUE (invalid argument)" style text for a result.
  std::string ErrorText(CUresult r) const {
    const char* s = nullptr;
    std::string text = "CUDA error " + std::to_string(static_cast<int>(r));
    if (cuGetErrorString != nullptr && cuGetErrorString(r, &s) == CUDA_SUCCESS && s) {
      text += " (" + std::string(s) + ")";
    }
    return text;
  }

 private:
  static const Driver* Open(std::string* why) {
    // Leaked on purpose: the driver stays loaded until the process exits
    // (unloading libcuda under live contexts is undefined).
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      *why = "no NVIDIA driver on this machine (libcuda.so.1 not found)";
      return nullptr;
    }
    auto* d = new Driver();
    bool missing = false;
    std::string missing_name;
#define FERRY_CUDA_LOAD(fn)                                           \
  *reinterpret_cast<void**>(&d->fn) = dlsym(lib, FERRY_CUDA_STR(fn)); \
  if (d->fn == nullptr && !missing) {                                 \
    missing = true;                                                   \
    missing_name = FERRY_CUDA_STR(fn);                                \
  }
    FERRY_CUDA_DRIVER_FUNCTIONS(FERRY_CUDA_LOAD)
#undef FERRY_CUDA_LOAD
    if (missing) {
      *why = "the NVIDIA driver is too old: libcuda.so.1 lacks " + missing_name +
             " (update the driver to CUDA 11.3 or later)";
      delete d;
      return nullptr;
    }
    CUresult r = d->cuInit(0);
    if (r != CUDA_SUCCESS) {
      *why = "the NVIDIA driver failed to initialise (cuInit: " + d->ErrorText(r) +
             "): is a GPU visible to this process?";
      delete d;
      return nullptr;
    }
    d->cuDriverGetVersion(&d->version);
    if (profile::Requested()) profile::Install(d);
    if (d->cuDeviceGetCount(&d->devices) != CUDA_SUCCESS || d->devices == 0) {
      *why = "the NVIDIA driver sees no GPU (CUDA_VISIBLE_DEVICES?)";
      delete d;
      return nullptr;
    }
    return d;
  }
};

}  // namespace ferry_cuda
