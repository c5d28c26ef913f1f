// Device memory through the fabric plugin (FI_HMEM), where a GPU is: a
// segment in GPU memory is sent and placed into GPU memory of the peer, on
// each local provider that offers FI_HMEM, and read back byte for byte.
// Skipped (with the reason) on a machine without an NVIDIA driver or GPU,
// or whose libfabric cannot register CUDA memory.
//
// The CUDA driver API is opened at run time (dlopen libcuda.so.1) instead
// of linking the CUDA toolkit: the test then builds on every machine,
// whatever CUDA version is installed or not, and runs against the driver
// of the machine it runs on, as libfabric's own CUDA support does.
#include "fabric_test_support.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ferry_fabric_test {
namespace {

// The few driver API entry points the test needs (cuda.h, CUDA 3.2+ ABI).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;

struct CudaDriver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);

  // Empty when ready, else why the test cannot run here.
  std::string Open() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return "no NVIDIA driver (libcuda.so.1 not found)";
    auto sym = [&](const char* name, auto* fn) {
      *reinterpret_cast<void**>(fn) = dlsym(lib, name);
      return *reinterpret_cast<void**>(fn) != nullptr;
    };
    if (!sym("cuInit", &cuInit) || !sym("cuDeviceGet", &cuDeviceGet) ||
        !sym("cuDevicePrimaryCtxRetain", &cuDevicePrimaryCtxRetain) ||
        !sym("cuCtxSetCurrent", &cuCtxSetCurrent) || !sym("cuMemAlloc_v2", &cuMemAlloc) ||
        !sym("cuMemFree_v2", &cuMemFree) || !sym("cuMemcpyHtoD_v2", &cuMemcpyHtoD) ||
        !sym("cuMemcpyDtoH_v2", &cuMemcpyDtoH) || !sym("cuMemsetD8_v2", &cuMemsetD8)) {
      return "libcuda.so.1 lacks the driver API entry points used here";
    }
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    if (cuInit(0) != 0 || cuDeviceGet(&dev, 0) != 0) return "no usable CUDA device";
    if (cuDevicePrimaryCtxRetain(&ctx, dev) != 0 || cuCtxSetCurrent(ctx) != 0) {
      return "cannot make device 0's primary context current";
    }
    return "";
  }
};

class FabricCuda : public ::testing::TestWithParam<const char*> {};

TEST_P(FabricCuda, DeviceSegmentLandsInDeviceMemory) {
  static CudaDriver cuda;
  static const std::string why = cuda.Open();
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string provider = GetParam();
  Params p({{"provider", provider}, {"hmem", "on"}});
  Ctx a, b;
  if (!a.ok() && a.status().code() == FERRY_UNAVAILABLE) {
    GTEST_SKIP() << "provider " << provider
                 << " offers no FI_HMEM here: " << a.status().ToString();
  }
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  if (!(a.t().info().memory_kinds & FERRY_MEM_CUDA)) {
    // This libfabric cannot register CUDA memory (built without CUDA
    // support); fabric_plugin_test's CudaMemoryRefused... covers that case.
    GTEST_SKIP() << "provider " << provider << " opened FI_HMEM but claims no CUDA "
                 << "memory here: " << a.t().description();
  }
  ASSERT_NE(a.t().description().find("FI_HMEM device memory: yes"), std::string::npos)
      << a.t().description();

  // Above every inline limit: the RMA (rendezvous) path, as device segments
  // always take.
  constexpr size_t kSize = 4 << 20;
  std::vector<uint8_t> want(kSize), got(kSize);
  FillPattern(want.data(), kSize, 77);
  CUdeviceptr src = 0, dst = 0;
  ASSERT_EQ(cuda.cuMemAlloc(&src, kSize), 0);
  ASSERT_EQ(cuda.cuMemAlloc(&dst, kSize), 0);
  ASSERT_EQ(cuda.cuMemcpyHtoD(src, want.data(), kSize), 0);
  ASSERT_EQ(cuda.cuMemsetD8(dst, 0, kSize), 0);
  const ferry_device_t gpu{FERRY_DEVICE_CUDA, 0};

  Link link;
  ASSERT_TRUE(Connect(&b, &a, &link));
  ferry::Status sent =
      SendMessage(&a, link.client, "gpu", {{reinterpret_cast<const void*>(src), kSize}},
                  nullptr, {}, gpu);
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  Event arrival;
  EXPECT_EQ(PlaceNext(&b, &a, link.server, {{reinterpret_cast<void*>(dst), kSize}},
                      &arrival, {}, gpu),
            FERRY_OK);
  ASSERT_EQ(arrival.segments.size(), 1u);
  EXPECT_FALSE(arrival.segments[0].is_inline) << "device bytes are never inline";
  ASSERT_TRUE(
      PumpUntil({&a, &b}, [&] { return a.Has(FERRY_EV_SEND_DONE, link.client); }));
  EXPECT_EQ(a.Take(FERRY_EV_SEND_DONE, link.client).status, FERRY_OK);
  ASSERT_EQ(cuda.cuMemcpyDtoH(got.data(), dst, kSize), 0);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), kSize), 0)
      << "the bytes in the destination's GPU memory differ from the source's";
  CloseLink(&b, &a, link);
  cuda.cuMemFree(src);
  cuda.cuMemFree(dst);
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricCuda, ::testing::Values("shm", "tcp;ofi_rxm"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string(param.param) == "shm" ? "shm" : "tcp_rxm";
                         });

}  // namespace
}  // namespace ferry_fabric_test
