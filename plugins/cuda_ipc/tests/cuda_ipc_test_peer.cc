// The other process of cuda_ipc_test's device tests (legacy IPC handles
// refuse to open in the process that made them). Connects to ADDRESS,
// prints "ready" once connected, then acts out MODE:
//   reuse   sends a 1 MiB device segment (seed 1), waits for SEND_DONE,
//           frees it, allocates the same size again (usually the same
//           address), fills it with seed 2 and sends it; prints
//           "same-address" or "new-address", then "done".
//   mixed   one message: host segment (seed 3), device segment (seed 4),
//           device segment written by a kernel-free memset on a stream
//           still busy when send() is called (seed 5 via HtoD async).
//   vmm     a device segment in VMM memory (cuMemCreate, no legacy handle):
//           the plugin's bounce path. Seed 6.
//   hang    sends seed 7, then a second message, prints "sent" and waits to
//           be killed.
// Exit 0 when every send completed OK.
#include "testkit/endpoint.h"
#include "testkit/plugin.h"

#include "ferry_support/cuda_driver.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using ferry::testkit::Endpoint;
using ferry::testkit::PumpUntil;

namespace {

const ferry_cuda::Driver* cu = nullptr;

unsigned char Byte(size_t i, int seed) {
  return static_cast<unsigned char>((i * 7 + static_cast<size_t>(seed) * 31) & 0xff);
}

std::vector<unsigned char> Bytes(size_t n, int seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Byte(i, seed);
  return v;
}

int Fail(const std::string& why) {
  std::printf("error %s\n", why.c_str());
  std::fflush(stdout);
  return 1;
}

bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  Fail(std::string(what) + ": " + cu->ErrorText(r));
  return false;
}

void Say(const char* what) {
  std::printf("%s\n", what);
  std::fflush(stdout);
}

ferry_segment_t DeviceSegment(CUdeviceptr p, uint64_t n, uint64_t stream) {
  ferry_segment_t s =
      ferry::testkit::Segment(reinterpret_cast<const void*>(p), n, FERRY_DEVICE_CUDA);
  s.stream = stream;
  return s;
}

// Sends and waits for SEND_DONE; false on failure.
bool SendAndWait(Endpoint& ep, ferry_conn_t* conn, const std::string& header,
                 const std::vector<ferry_segment_t>& segs, void* cookie) {
  ferry::Status st = ep.t().Send(conn, ferry::testkit::SendArgs(header, segs, cookie));
  if (!st.ok()) return Fail("send: " + st.ToString()), false;
  if (!PumpUntil(
          {&ep}, [&] { return ep.Has(FERRY_EV_SEND_DONE, conn); },
          std::chrono::seconds(30))) {
    return Fail("no SEND_DONE"), false;
  }
  ferry::testkit::Event e = ep.Take(FERRY_EV_SEND_DONE, conn);
  if (e.status != FERRY_OK) return Fail("SEND_DONE: " + e.message), false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return Fail("usage: cuda_ipc_test_peer ADDRESS MODE");
  const std::string address = argv[1], mode = argv[2];
  std::string why;
  cu = ferry_cuda::Driver::Get(&why);
  if (cu == nullptr) return Fail("no GPU: " + why);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (!Ok(cu->cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !Ok(cu->cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      !Ok(cu->cuCtxSetCurrent(ctx), "cuCtxSetCurrent")) {
    return 1;
  }
  auto plugin = ferry::testkit::LoadPlugin(FERRY_CUDA_IPC_PLUGIN_DIR, "cuda_ipc");
  if (!plugin.ok()) return Fail("load: " + plugin.status().ToString());
  Endpoint ep(plugin.value());
  if (!ep.ok()) return Fail("init: " + ep.status().ToString());
  ferry_conn_t* conn = nullptr;
  ferry::Status st = ep.t().Connect(address, nullptr, &conn);
  if (!st.ok()) return Fail("connect: " + st.ToString());
  if (!PumpUntil(
          {&ep}, [&] { return ep.Has(FERRY_EV_CONNECTED); }, std::chrono::seconds(30))) {
    return Fail("no CONNECTED");
  }
  if (ep.Take(FERRY_EV_CONNECTED).status != FERRY_OK) return Fail("connect failed");
  Say("ready");
  cu->cuCtxSetCurrent(ctx);  // the plugin may have made another current

  constexpr size_t kMiB = 1 << 20;
  int cookie = 0;
  if (mode == "reuse") {
    CUdeviceptr a = 0, b = 0;
    std::vector<unsigned char> one = Bytes(kMiB, 1), two = Bytes(kMiB, 2);
    if (!Ok(cu->cuMemAlloc(&a, kMiB), "cuMemAlloc") ||
        !Ok(cu->cuMemcpyHtoD(a, one.data(), kMiB), "HtoD")) {
      return 1;
    }
    if (!SendAndWait(ep, conn, "seed=1", {DeviceSegment(a, kMiB, FERRY_STREAM_LEGACY)},
                     &cookie)) {
      return 1;
    }
    cu->cuCtxSetCurrent(ctx);
    if (!Ok(cu->cuMemFree(a), "cuMemFree") ||
        !Ok(cu->cuMemAlloc(&b, kMiB), "cuMemAlloc") ||
        !Ok(cu->cuMemcpyHtoD(b, two.data(), kMiB), "HtoD")) {
      return 1;
    }
    Say(a == b ? "same-address" : "new-address");
    if (!SendAndWait(ep, conn, "seed=2", {DeviceSegment(b, kMiB, FERRY_STREAM_LEGACY)},
                     &cookie)) {
      return 1;
    }
  } else if (mode == "mixed") {
    std::vector<unsigned char> host = Bytes(4096, 3), d1 = Bytes(kMiB, 4),
                               d2 = Bytes(8 * kMiB, 5);
    CUdeviceptr p1 = 0, p2 = 0;
    CUstream s = nullptr;
    if (!Ok(cu->cuMemAlloc(&p1, kMiB), "cuMemAlloc") ||
        !Ok(cu->cuMemAlloc(&p2, 8 * kMiB), "cuMemAlloc") ||
        !Ok(cu->cuMemcpyHtoD(p1, d1.data(), kMiB), "HtoD") ||
        !Ok(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
      return 1;
    }
    // p2's bytes are still being written on `s` when send() is called:
    // zeros first, then the pattern, both queued on the stream.
    if (!Ok(cu->cuMemsetD8Async(p2, 0, 8 * kMiB, s), "memset") ||
        !Ok(cu->cuMemcpyAsync(p2, reinterpret_cast<CUdeviceptr>(d2.data()), 8 * kMiB, s),
            "cuMemcpyAsync")) {
      return 1;
    }
    ferry_segment_t h = ferry::testkit::Segment(host.data(), host.size());
    if (!SendAndWait(ep, conn, "mixed",
                     {h, DeviceSegment(p1, kMiB, FERRY_STREAM_READY),
                      DeviceSegment(p2, 8 * kMiB, reinterpret_cast<uint64_t>(s))},
                     &cookie)) {
      return 1;
    }
  } else if (mode == "vmm") {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr p = 0;
    if (!Ok(cu->cuMemGetAllocationGranularity(&gran, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "granularity") ||
        !Ok(cu->cuMemCreate(&h, 2 * gran, &prop, 0), "cuMemCreate") ||
        !Ok(cu->cuMemAddressReserve(&p, 2 * gran, 0, 0, 0), "reserve") ||
        !Ok(cu->cuMemMap(p, 2 * gran, 0, h, 0), "map")) {
      return 1;
    }
    CUmemAccessDesc acc{};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    std::vector<unsigned char> six = Bytes(gran, 6);
    if (!Ok(cu->cuMemSetAccess(p, 2 * gran, &acc, 1), "access") ||
        !Ok(cu->cuMemcpyHtoD(p + 100, six.data(), gran), "HtoD")) {
      return 1;
    }
    if (!SendAndWait(ep, conn, "vmm", {DeviceSegment(p + 100, gran, FERRY_STREAM_LEGACY)},
                     &cookie)) {
      return 1;
    }
  } else if (mode == "hang") {
    CUdeviceptr a = 0;
    std::vector<unsigned char> seven = Bytes(kMiB, 7);
    if (!Ok(cu->cuMemAlloc(&a, kMiB), "cuMemAlloc") ||
        !Ok(cu->cuMemcpyHtoD(a, seven.data(), kMiB), "HtoD")) {
      return 1;
    }
    if (!SendAndWait(ep, conn, "seed=7", {DeviceSegment(a, kMiB, FERRY_STREAM_LEGACY)},
                     &cookie)) {
      return 1;
    }
    st = ep.t().Send(
        conn, ferry::testkit::SendArgs(
                  "seed=7", {DeviceSegment(a, kMiB, FERRY_STREAM_LEGACY)}, &cookie));
    if (!st.ok()) return Fail("send: " + st.ToString());
    Say("sent");
    for (;;) {
      ep.PollOnce();
      usleep(1000);
    }
  } else {
    return Fail("unknown mode " + mode);
  }
  Say("done");
  // Stay until the receiver closes, so its copies never race our exit.
  PumpUntil(
      {&ep}, [&] { return ep.Has(FERRY_EV_CONN_BROKEN); }, std::chrono::seconds(30));
  return 0;
}
