// The route of one message (engine/route.h), without transports: which of
// the peer's endpoints a host message and a device message take, and why
// none does.
#include "engine/route.h"

#include <gtest/gtest.h>

namespace ferry::route {
namespace {

constexpr uint64_t kHost = FERRY_MEM_HOST;
constexpr uint64_t kCuda = FERRY_MEM_HOST | FERRY_MEM_CUDA;
const std::string kHostA = "host=boot-a;ipc=4026531839";
const std::string kHostB = "host=boot-b;ipc=4026531839";

Local Tcp() {
  return Local{"tcp", kHost, 10, "net=default"};
}
Local Shm(const std::string& domain = kHostA) {
  return Local{"shm", kHost, 50, domain};
}
Local CudaIpc(const std::string& domain = kHostA) {
  return Local{"cuda_ipc", kCuda, 5, domain + ";net=default"};
}
wire::Endpoint Ep(const Local& l) {
  return wire::Endpoint{l.name, l.name + "-address", l.domain, l.priority};
}

TEST(RouteTest, SameHostDeviceMessagesTakeCudaIpcAndHostOnesShm) {
  const std::vector<Local> mine{Tcp(), Shm(), CudaIpc()};
  const std::vector<wire::Endpoint> theirs{Ep(Tcp()), Ep(Shm()), Ep(CudaIpc())};
  auto host = Choose(mine, theirs, kHost, "peer");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->plugin, "shm");
  EXPECT_EQ(host->address, "shm-address");
  auto device = Choose(mine, theirs, kCuda, "peer");
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ(device->plugin, "cuda_ipc");
  EXPECT_EQ(device->address, "cuda_ipc-address");
}

TEST(RouteTest, OnlyCudaIpcCarriesEverything) {
  const std::vector<Local> mine{CudaIpc()};
  const std::vector<wire::Endpoint> theirs{Ep(CudaIpc())};
  EXPECT_EQ(Choose(mine, theirs, kHost, "peer")->plugin, "cuda_ipc");
  EXPECT_EQ(Choose(mine, theirs, kCuda, "peer")->plugin, "cuda_ipc");
}

TEST(RouteTest, AnotherHostHasNoDeviceRouteSoItIsStaged) {
  const std::vector<Local> mine{Tcp(), Shm(), CudaIpc()};
  const std::vector<wire::Endpoint> theirs{Ep(Tcp()), Ep(Shm(kHostB)),
                                           Ep(CudaIpc(kHostB))};
  auto host = Choose(mine, theirs, kHost, "peer");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->plugin, "tcp") << "shm is in another domain";
  auto device = Choose(mine, theirs, kCuda, "peer");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), FERRY_UNAVAILABLE);
  EXPECT_NE(
      device.status().message().find("no transport that moves CUDA memory reaches it"),
      std::string::npos)
      << device.status().message();
  EXPECT_NE(device.status().message().find("cuda_ipc: the peer's is in domain"),
            std::string::npos)
      << device.status().message();
}

TEST(RouteTest, APeerWithoutTheDevicePluginHasNoDeviceRoute) {
  const std::vector<Local> mine{Tcp(), CudaIpc()};
  const std::vector<wire::Endpoint> theirs{Ep(Tcp())};
  EXPECT_EQ(Choose(mine, theirs, kHost, "peer")->plugin, "tcp");
  auto device = Choose(mine, theirs, kCuda, "peer");
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.status().message().find("cuda_ipc: not at the peer"),
            std::string::npos)
      << device.status().message();
}

TEST(RouteTest, WithoutADeviceTransportHereTheReasonSaysSo) {
  const std::vector<Local> mine{Tcp(), Shm()};
  const std::vector<wire::Endpoint> theirs{Ep(Tcp()), Ep(Shm()), Ep(CudaIpc())};
  auto device = Choose(mine, theirs, kCuda, "peer");
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.status().message().find("this worker has none loaded"),
            std::string::npos)
      << device.status().message();
}

TEST(RouteTest, TheHighestPriorityDeviceTransportWinsAndBothSidesAgree) {
  // A second device-capable transport (fabric with device memory, say).
  Local fabric{"fabric", kCuda, 30, "fabric-domain"};
  const std::vector<Local> a{Tcp(), CudaIpc(), fabric};
  const std::vector<Local> b{fabric, CudaIpc(), Tcp()};  // another load order
  std::vector<wire::Endpoint> a_eps, b_eps;
  for (const auto& l : a) a_eps.push_back(Ep(l));
  for (const auto& l : b) b_eps.push_back(Ep(l));
  EXPECT_EQ(Choose(a, b_eps, kCuda, "b")->plugin, "fabric");
  EXPECT_EQ(Choose(b, a_eps, kCuda, "a")->plugin, "fabric");
  // Equal priorities: the smaller name, whatever the order.
  Local other{"another", kCuda, 5, CudaIpc().domain};
  const std::vector<Local> c{CudaIpc(), other};
  const std::vector<Local> d{other, CudaIpc()};
  std::vector<wire::Endpoint> c_eps, d_eps;
  for (const auto& l : c) c_eps.push_back(Ep(l));
  for (const auto& l : d) d_eps.push_back(Ep(l));
  EXPECT_EQ(Choose(c, d_eps, kCuda, "d")->plugin, "another");
  EXPECT_EQ(Choose(d, c_eps, kCuda, "c")->plugin, "another");
}

TEST(RouteTest, HostMessagesKeepTodaysRoute) {
  // Host messages ignore memory kinds (a plugin reporting none still
  // carries host memory) and prefer our first transport on a tie.
  const std::vector<Local> mine{Local{"a", 0, 10, "d"}, Local{"b", kHost, 10, "d"}};
  const std::vector<wire::Endpoint> theirs{wire::Endpoint{"b", "b1", "d", 10},
                                           wire::Endpoint{"a", "a1", "d", 10}};
  EXPECT_EQ(Choose(mine, theirs, kHost, "peer")->plugin, "a");
  auto none = Choose(mine, {}, kHost, "peer");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no transport reaches worker 'peer'"),
            std::string::npos);
}

TEST(RouteTest, MemoryKinds) {
  EXPECT_EQ(MemoryKindOf(DLDevice{kDLCPU, 0}), FERRY_MEM_HOST);
  EXPECT_EQ(MemoryKindOf(DLDevice{kDLCUDAHost, 0}), FERRY_MEM_HOST);
  EXPECT_EQ(MemoryKindOf(DLDevice{kDLCUDA, 1}), FERRY_MEM_CUDA);
  EXPECT_FALSE(NeedsDevice(FERRY_MEM_HOST));
  EXPECT_TRUE(NeedsDevice(FERRY_MEM_HOST | FERRY_MEM_CUDA));
}

}  // namespace
}  // namespace ferry::route
