// ferry-cuda-probe: which CUDA IPC paths this machine allows, in under 30
// seconds. One line per check, "ok" or "refused: <CUDA error>"; exit status
// 0 when the legacy path the cuda_ipc plugin uses works (export, open in a
// second process, D2D copy verified byte for byte), 1 when it does not, 2
// for a usage error.
//
// The second process is this program again (posix_spawn, never fork after
// cuInit), given one end of a socket pair: the parent sends it the memory
// and event handles, and the VMM allocation's file descriptor with
// SCM_RIGHTS.
//
//   ferry-cuda-probe            run every check
//   ferry-cuda-probe --child N  (internal) the second process, socket fd N
#include "ferry_support/cuda_driver.h"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr size_t kBytes = 1 << 20;

const ferry_cuda::Driver* cu = nullptr;

// "ok" or "refused: <error>", printed as one line.
bool Check(const char* what, CUresult r, const std::string& detail = "") {
  if (r == CUDA_SUCCESS) {
    std::printf("%-58s ok%s\n", what,
                detail.empty() ? "" : (" (" + detail + ")").c_str());
  } else {
    std::printf("%-58s refused: %s\n", what, cu->ErrorText(r).c_str());
  }
  std::fflush(stdout);
  return r == CUDA_SUCCESS;
}

unsigned char Pattern(size_t i) {
  return static_cast<unsigned char>((i * 131 + 7) & 0xff);
}

struct Offer {
  CUipcMemHandle mem;
  CUipcEventHandle event;
  uint64_t length;
  uint64_t vmm_size;  // 0: no VMM fd attached
  int32_t mem_ok;
  int32_t event_ok;
};

bool SendOffer(int sock, const Offer& offer, int fd) {
  iovec iov{const_cast<Offer*>(&offer), sizeof offer};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof offer);
}

bool ReceiveOffer(int sock, Offer* offer, int* fd) {
  iovec iov{offer, sizeof *offer};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  *fd = -1;
  if (recvmsg(sock, &msg, MSG_WAITALL) != static_cast<ssize_t>(sizeof *offer))
    return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      std::memcpy(fd, CMSG_DATA(c), sizeof *fd);
    }
  }
  return true;
}

CUmemAllocationProp VmmProp() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Maps a VMM allocation read-write on device 0 at a new address.
CUresult MapVmm(CUmemGenericAllocationHandle h, size_t size, CUdeviceptr* out) {
  CUresult r = cu->cuMemAddressReserve(out, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = cu->cuMemMap(*out, size, 0, h, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location = VmmProp().location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = cu->cuMemSetAccess(*out, size, &access, 1);
  }
  return r;
}

CUresult UsePrimary(CUcontext* ctx) {
  CUdevice dev = 0;
  CUresult r = cu->cuDeviceGet(&dev, 0);
  if (r == CUDA_SUCCESS) r = cu->cuDevicePrimaryCtxRetain(ctx, dev);
  if (r == CUDA_SUCCESS) r = cu->cuCtxSetCurrent(*ctx);
  return r;
}

// The second process: open what the parent exported, copy, verify.
int Child(int sock) {
  alarm(25);
  std::string why;
  cu = ferry_cuda::Driver::Get(&why);
  if (cu == nullptr) {
    std::printf("%-58s refused: %s\n", "second process: driver", why.c_str());
    return 1;
  }
  CUcontext ctx = nullptr;
  if (!Check("second process: primary context on device 0", UsePrimary(&ctx))) return 1;
  Offer offer{};
  int vmm_fd = -1;
  if (!ReceiveOffer(sock, &offer, &vmm_fd)) {
    std::printf("second process: no handles from the parent\n");
    return 1;
  }
  bool legacy = false;
  if (offer.mem_ok) {
    CUdeviceptr mapped = 0;
    if (Check("legacy IPC open in a second process (cuIpcOpenMemHandle)",
              cu->cuIpcOpenMemHandle(&mapped, offer.mem,
                                     CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))) {
      CUdeviceptr again = 0;
      CUresult r =
          cu->cuIpcOpenMemHandle(&again, offer.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      Check("the same handle opened twice (reference counted)", r,
            r == CUDA_SUCCESS ? (again == mapped ? "same address" : "another address")
                              : "");
      if (r == CUDA_SUCCESS) cu->cuIpcCloseMemHandle(again);
      CUstream stream = nullptr;
      cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
      if (offer.event_ok) {
        CUevent ev = nullptr;
        CUresult er = cu->cuIpcOpenEventHandle(&ev, offer.event);
        if (er == CUDA_SUCCESS) er = cu->cuStreamWaitEvent(stream, ev, 0);
        Check("interprocess event opened and waited on (cuIpcOpenEventHandle)", er);
        if (ev != nullptr) cu->cuEventDestroy(ev);
      }
      CUdeviceptr local = 0;
      std::vector<unsigned char> host(offer.length, 0);
      r = cu->cuMemAlloc(&local, offer.length);
      if (r == CUDA_SUCCESS)
        r = cu->cuMemcpyDtoDAsync(local, mapped, offer.length, stream);
      if (r == CUDA_SUCCESS) r = cu->cuStreamSynchronize(stream);
      if (r == CUDA_SUCCESS) r = cu->cuMemcpyDtoH(host.data(), local, offer.length);
      size_t bad = 0;
      for (size_t i = 0; r == CUDA_SUCCESS && i < host.size(); ++i) {
        bad += host[i] != Pattern(i);
      }
      if (r == CUDA_SUCCESS && bad != 0) {
        std::printf("%-58s refused: %zu of %zu bytes differ\n",
                    "D2D copy through the opened handle, verified", bad, host.size());
      } else {
        legacy = Check("D2D copy through the opened handle, verified", r,
                       std::to_string(offer.length) + " bytes byte for byte");
      }
      if (local != 0) cu->cuMemFree(local);
      cu->cuIpcCloseMemHandle(mapped);
      if (stream != nullptr) cu->cuStreamDestroy(stream);
    }
  }
  if (vmm_fd >= 0 && offer.vmm_size > 0) {
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cu->cuMemImportFromShareableHandle(
        &h, reinterpret_cast<void*>(static_cast<uintptr_t>(vmm_fd)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr p = 0;
    if (r == CUDA_SUCCESS) r = MapVmm(h, offer.vmm_size, &p);
    std::vector<unsigned char> host(4096, 0);
    if (r == CUDA_SUCCESS) r = cu->cuMemcpyDtoH(host.data(), p, host.size());
    bool same = r == CUDA_SUCCESS;
    for (unsigned char b : host) same = same && b == 0x5a;
    if (r == CUDA_SUCCESS && !same) {
      std::printf("%-58s refused: the bytes differ\n",
                  "VMM POSIX-fd import over SCM_RIGHTS, verified");
    } else {
      Check("VMM POSIX-fd import over SCM_RIGHTS, verified", r, "4096 bytes");
    }
    if (p != 0) {
      cu->cuMemUnmap(p, offer.vmm_size);
      cu->cuMemAddressFree(p, offer.vmm_size);
    }
    if (h != 0) cu->cuMemRelease(h);
    close(vmm_fd);
  }
  cu->cuCtxSetCurrent(nullptr);
  return legacy ? 0 : 1;
}

int Parent(const char* self) {
  alarm(30);
  std::string why;
  cu = ferry_cuda::Driver::Get(&why);
  if (cu == nullptr) {
    std::printf("%-58s refused: %s\n", "NVIDIA driver and GPU", why.c_str());
    return 1;
  }
  CUdevice dev = 0;
  char name[256] = "?";
  cu->cuDeviceGet(&dev, 0);
  cu->cuDeviceGetName(name, sizeof name, dev);
  char bus[32] = "?";
  cu->cuDeviceGetPCIBusId(bus, sizeof bus, dev);
  std::printf("%-58s ok (driver API %d.%d, %d GPU(s); device 0: %s, %s)\n",
              "NVIDIA driver and GPU", cu->version / 1000, (cu->version % 1000) / 10,
              cu->devices, name, bus);
  CUcontext ctx = nullptr;
  if (!Check("primary context on device 0", UsePrimary(&ctx))) return 1;

  Offer offer{};
  offer.length = kBytes;
  CUdeviceptr buf = 0;
  std::vector<unsigned char> pattern(kBytes);
  for (size_t i = 0; i < kBytes; ++i) pattern[i] = Pattern(i);
  CUresult r = cu->cuMemAlloc(&buf, kBytes);
  if (r == CUDA_SUCCESS) r = cu->cuMemcpyHtoD(buf, pattern.data(), kBytes);
  if (!Check("cuMemAlloc + cuMemcpyHtoD (1 MiB)", r)) return 1;
  // The allocation's base and id, as the plugin exports them.
  CUdeviceptr base = 0;
  unsigned long long id = 0;
  r = cu->cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, buf + 4096);
  if (r == CUDA_SUCCESS) {
    r = cu->cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, buf + 4096);
  }
  Check("allocation base and buffer id (cuPointerGetAttribute)", r,
        r == CUDA_SUCCESS ? (base == buf ? "base found" : "BASE DIFFERS") : "");
  offer.mem_ok = Check("legacy IPC export (cuIpcGetMemHandle)",
                       cu->cuIpcGetMemHandle(&offer.mem, buf));
  CUevent ev = nullptr;
  r = cu->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
  if (r == CUDA_SUCCESS) r = cu->cuEventRecord(ev, CU_STREAM_LEGACY);
  if (r == CUDA_SUCCESS) r = cu->cuIpcGetEventHandle(&offer.event, ev);
  offer.event_ok = Check("interprocess event export (cuIpcGetEventHandle)", r);

  // VMM with a POSIX fd: what frameworks' default allocators do not make.
  CUmemAllocationProp prop = VmmProp();
  size_t gran = 0;
  CUmemGenericAllocationHandle vmm = 0;
  CUdeviceptr vmm_ptr = 0;
  int vmm_fd = -1;
  r = cu->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_SUCCESS) r = cu->cuMemCreate(&vmm, gran, &prop, 0);
  if (r == CUDA_SUCCESS) r = MapVmm(vmm, gran, &vmm_ptr);
  if (r == CUDA_SUCCESS) r = cu->cuMemsetD8(vmm_ptr, 0x5a, gran);
  if (r == CUDA_SUCCESS) {
    r = cu->cuMemExportToShareableHandle(&vmm_fd, vmm,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  }
  if (Check("VMM POSIX-fd export (cuMemCreate + cuMemExportToShareableHandle)", r)) {
    offer.vmm_size = gran;
    CUipcMemHandle unused;
    r = cu->cuIpcGetMemHandle(&unused, vmm_ptr);
    std::printf("%-58s %s\n",
                "legacy handle of VMM memory (the plugin bounces if refused)",
                r == CUDA_SUCCESS ? "ok" : ("refused: " + cu->ErrorText(r)).c_str());
  }

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    std::perror("socketpair");
    return 1;
  }
  const std::string fd_arg = std::to_string(sv[1]);
  char* argv[] = {const_cast<char*>(self), const_cast<char*>("--child"),
                  const_cast<char*>(fd_arg.c_str()), nullptr};
  std::fflush(stdout);
  pid_t pid = 0;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) != 0) {
    std::perror("posix_spawn");
    return 1;
  }
  close(sv[1]);
  SendOffer(sv[0], offer, vmm_fd);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(25);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::printf("the second process did not finish in 25 s: killed\n");
      break;
    }
    usleep(10000);
  }
  close(sv[0]);
  if (vmm_fd >= 0) close(vmm_fd);
  if (vmm_ptr != 0) {
    cu->cuMemUnmap(vmm_ptr, gran);
    cu->cuMemAddressFree(vmm_ptr, gran);
  }
  if (vmm != 0) cu->cuMemRelease(vmm);
  if (ev != nullptr) cu->cuEventDestroy(ev);
  cu->cuMemFree(buf);
  const bool legacy = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("%-58s %s\n", "cuda_ipc's legacy path",
              legacy ? "usable" : "NOT usable on this machine");
  return legacy ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) return Child(std::atoi(argv[2]));
  if (argc != 1) {
    std::fprintf(stderr,
                 "usage: ferry-cuda-probe\n\nReports which CUDA IPC paths this machine "
                 "allows; exit 0 when the legacy path cuda_ipc uses works.\n");
    return 2;
  }
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::perror("readlink /proc/self/exe");
    return 1;
  }
  self[n] = '\0';
  return Parent(self);
}
