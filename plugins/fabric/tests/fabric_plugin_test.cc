// Behaviour specific to the fabric transport, on the real libfabric
// providers of this machine: provider selection and its errors, the RMA-read
// path and the chunked-message fallback moving 64 MiB byte for byte, host
// registrations (reg/dereg) at offsets inside a registration (remote
// addresses with and without FI_MR_VIRT_ADDR), the FI_MR_LOCAL paths forced
// on, the peer-close protocol, and the capability claims per provider. The
// contracts every plugin owes are checked by conformance/.
#include "fabric_test_support.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

namespace ferry_fabric_test {
namespace {

// libcuda.so.1, without which no libfabric can register CUDA memory.
bool CudaDriverInstalled() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  dlclose(lib);
  return true;
}

// What the plugin's hmem=auto looks for (provider.cc).
bool GpuDriverPresent() {
  return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/kfd", F_OK) == 0;
}

constexpr uint64_t kMiB = 1024 * 1024;

void* Cookie(uintptr_t v) {
  return reinterpret_cast<void*>(v);
}

// Answers the next arrival on `conn` by placing its segments into `dests`
// (NULL = drop) and waits for PLACE_DONE; returns its status.
ferry_mr_t* Register(Ctx* ctx, void* data, uint64_t length, uint32_t access) {
  ferry_reg_args_t r{};
  r.struct_size = FERRY_REG_ARGS_STRUCT_SIZE;
  r.access = access;
  r.data = data;
  r.length = length;
  r.device = {FERRY_DEVICE_CPU, 0};
  ferry_mr_t* mr = nullptr;
  ferry::Status st = ctx->t().Reg(r, &mr);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return mr;
}

class FabricProvider : public ::testing::TestWithParam<const char*> {
 protected:
  std::string provider() const { return GetParam(); }
};

std::string ProviderName(const ::testing::TestParamInfo<const char*>& info) {
  return std::string(info.param) == "shm" ? "shm" : "tcp_rxm";
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricProvider,
                         ::testing::Values("tcp;ofi_rxm", "shm"), ProviderName);

// --- provider selection ---------------------------------------------------------

TEST(FabricSelection, UnknownProviderIsUnavailableWithAClearMessage) {
  Params p({{"provider", "no_such_provider"}});
  Ctx ctx;
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), FERRY_UNAVAILABLE) << ctx.status().ToString();
  const std::string& m = ctx.status().message();
  EXPECT_NE(m.find("no_such_provider"), std::string::npos) << m;
  EXPECT_NE(m.find("fi_getinfo"), std::string::npos) << m;
  EXPECT_NE(m.find("No data available"), std::string::npos) << m;  // fi_strerror
  EXPECT_NE(m.find("FERRY_FABRIC_PROVIDER"), std::string::npos) << m;
  // What *is* usable here is listed, so the user can pick.
  EXPECT_NE(m.find("tcp;ofi_rxm"), std::string::npos) << m;
  EXPECT_NE(m.find("shm"), std::string::npos) << m;
}

// On a GPU host, hmem=auto asks for FI_HMEM; libfabric's shm provider then
// offers an entry without fi_inject (inject size 0), which would put every
// small message on a send with a completion: auto declines it and says why,
// hmem=on takes it. (gpu_driver=on stands in for /dev/nvidiactl; the same
// was seen on a host with an H200 and a CUDA-enabled libfabric.)
TEST(FabricHmem, AutoKeepsShmsInjectPathOnAGpuHost) {
  {
    Params p({{"provider", "shm"}, {"gpu_driver", "on"}});
    Ctx ctx;
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    const std::string& d = ctx.t().description();
    EXPECT_NE(d.find("FI_HMEM device memory: no"), std::string::npos) << d;
    EXPECT_NE(d.find("hmem=auto declined it"), std::string::npos) << d;
    EXPECT_NE(d.find("fi_inject"), std::string::npos) << d;
    EXPECT_NE(d.find("inject 4 KiB"), std::string::npos) << d;
    EXPECT_EQ(ctx.t().info().memory_kinds, FERRY_MEM_HOST);
  }
  {
    Params p({{"provider", "shm"}, {"hmem", "on"}});
    Ctx ctx;
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    const std::string& d = ctx.t().description();
    EXPECT_NE(d.find("inject 0 B"), std::string::npos) << d;
    // CUDA is claimed only where this libfabric registers CUDA memory
    // (Debian's and Ubuntu's are built without CUDA support).
    const bool cuda = d.find("FI_HMEM device memory: yes (CUDA)") != std::string::npos;
    EXPECT_EQ(ctx.t().info().memory_kinds,
              cuda ? (FERRY_MEM_HOST | FERRY_MEM_CUDA) : FERRY_MEM_HOST);
    if (!cuda) {
      EXPECT_NE(d.find("cannot register CUDA memory"), std::string::npos) << d;
    }
  }
  {
    // Without a GPU driver auto never asks.
    Params p({{"provider", "shm"}, {"gpu_driver", "off"}});
    Ctx ctx;
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    EXPECT_EQ(ctx.t().description().find("declined"), std::string::npos)
        << ctx.t().description();
  }
}

// Where FI_HMEM is open but this libfabric cannot register CUDA memory (a
// distribution build without CUDA support: the case of the GPU host this
// was found on, where such a segment's transfer never completed), a CUDA
// segment or destination is refused at once with the reason, and nothing
// is sent.
TEST(FabricHmem, CudaMemoryRefusedWhereLibfabricCannotRegisterIt) {
  Params p({{"provider", "shm"}, {"hmem", "on"}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  const bool claimed = (a.t().info().memory_kinds & FERRY_MEM_CUDA) != 0;
  if (!CudaDriverInstalled()) {
    // No libfabric registers CUDA memory without the driver.
    ASSERT_FALSE(claimed) << a.t().description();
  } else if (claimed) {
    GTEST_SKIP() << "this libfabric registers CUDA memory (fabric_hmem_cuda_test "
                    "moves device memory here)";
  }
  Link link;
  ASSERT_TRUE(Connect(&b, &a, &link));
  // Never dereferenced: the segment must be refused before it is touched.
  const void* device_ptr = reinterpret_cast<const void*>(uintptr_t{0x7f0000000000});
  ferry::Status st = SendMessage(&a, link.client, "gpu", {{device_ptr, 1 << 20}},
                                 Cookie(7), {}, {FERRY_DEVICE_CUDA, 0});
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << st.ToString();
  EXPECT_NE(st.message().find("device memory"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("CUDA"), std::string::npos) << st.message();
  EXPECT_FALSE(a.Has(FERRY_EV_SEND_DONE, link.client));
  // A host message still goes, and a CUDA destination for it is refused.
  std::vector<uint8_t> data(64 << 10);
  FillPattern(data.data(), data.size(), 3);
  ASSERT_TRUE(
      SendMessage(&a, link.client, "host", {{data.data(), data.size()}}, Cookie(8)).ok());
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return b.Has(FERRY_EV_ARRIVAL, link.server); }));
  Event arrival = b.Take(FERRY_EV_ARRIVAL, link.server);
  ASSERT_EQ(arrival.segments.size(), 1u);
  ferry_place_dest_t d{};
  d.struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
  d.data = reinterpret_cast<void*>(uintptr_t{0x7f0000000000});
  d.capacity = data.size();
  d.device = {FERRY_DEVICE_CUDA, 0};
  ferry_place_args_t pa{};
  pa.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  pa.num_dests = 1;
  pa.msg_id = arrival.msg_id;
  pa.dests = &d;
  pa.dest_stride = sizeof d;
  if (!arrival.segments[0].is_inline) {
    st = b.t().Place(link.server, pa);
    EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << st.ToString();
    EXPECT_NE(st.message().find("CUDA"), std::string::npos) << st.message();
  }
  // Refused, the arrival is still there to answer.
  std::vector<uint8_t> got(data.size());
  ASSERT_EQ(PlaceArrival(&b, &a, link.server, arrival, {{got.data(), got.size()}}),
            FERRY_OK);
  EXPECT_EQ(got, data);
  CloseLink(&b, &a, link);
}

TEST_P(FabricProvider, DescribesWhatItOpenedAndClaimsOnlyWhatItDoes) {
  Params p({{"provider", provider()}});
  Ctx ctx;
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const std::string& d = ctx.t().description();
  EXPECT_NE(d.find("provider " + provider()), std::string::npos) << d;
  EXPECT_NE(d.find("fabric "), std::string::npos) << d;
  EXPECT_NE(d.find("domain "), std::string::npos) << d;
  // Device memory is claimed exactly when the description says so; with
  // no GPU driver there is none, and hmem=auto never takes an FI_HMEM entry
  // that leaves host memory without fi_inject (shm's, on a GPU host).
  const bool hmem = d.find("FI_HMEM device memory: yes") != std::string::npos;
  EXPECT_TRUE(hmem || d.find("FI_HMEM device memory: no") != std::string::npos) << d;
  if (!GpuDriverPresent()) {
    EXPECT_FALSE(hmem) << "no GPU driver here: " << d;
  }
  if (provider() == "shm") {
    EXPECT_FALSE(hmem) << d;
    EXPECT_NE(d.find("inject 4 KiB"), std::string::npos) << d;
  }
  EXPECT_NE(d.find("RMA read"), std::string::npos) << d;
  EXPECT_EQ(ctx.t().domain().rfind("fabric:" + provider() + ":", 0), 0u)
      << ctx.t().domain();
  const ferry_context_info_t& info = ctx.t().info();
  EXPECT_TRUE(info.caps & FERRY_CAP_ORDERED);
  EXPECT_TRUE(info.caps & FERRY_CAP_REGISTRATION);
  EXPECT_TRUE(info.caps & FERRY_CAP_ZERO_COPY_RECV);
  EXPECT_FALSE(info.caps & FERRY_CAP_DETECTS_PEER_DEATH)
      << "an RDM provider need not notice a dead peer: heartbeats must";
  EXPECT_EQ(info.memory_kinds, hmem ? (FERRY_MEM_HOST | FERRY_MEM_CUDA) : FERRY_MEM_HOST)
      << d;
  if (provider() == "shm") {
    // shm's CQ has no wait object: no wakeup fd, the host polls.
    EXPECT_FALSE(info.caps & FERRY_CAP_WAKEUP_FD);
    EXPECT_EQ(info.wakeup_fd, -1);
    EXPECT_NE(d.find("polled"), std::string::npos) << d;
    EXPECT_NE(ctx.t().domain().find(";host="), std::string::npos);
  } else {
    EXPECT_TRUE(info.caps & FERRY_CAP_WAKEUP_FD);
    EXPECT_GE(info.wakeup_fd, 0);
  }
}

TEST(FabricSelection, AddressOfAnotherProviderIsRefusedAtOnce) {
  std::string shm_address;
  Ctx* shm_ctx;
  {
    Params p({{"provider", "shm"}});
    shm_ctx = new Ctx();
  }
  ASSERT_TRUE(shm_ctx->ok()) << shm_ctx->status().ToString();
  ferry_listener_t* l = nullptr;
  ASSERT_TRUE(shm_ctx->t().Listen("", nullptr, &l).ok());
  shm_address = shm_ctx->t().ListenerAddress(l).value();
  EXPECT_EQ(shm_address.rfind("fi://shm/", 0), 0u) << shm_address;

  Params p({{"provider", "tcp;ofi_rxm"}});
  Ctx tcp;
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  ferry_conn_t* conn = nullptr;
  ferry::Status st = tcp.t().Connect(shm_address, nullptr, &conn);
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << st.ToString();
  EXPECT_NE(st.message().find("provider 'shm'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("FERRY_FABRIC_PROVIDER=shm"), std::string::npos)
      << st.message();
  for (const char* junk : {"", "127.0.0.1:80", "fi://tcp;ofi_rxm/zz/1",
                           "fi://tcp;ofi_rxm/0a0b", "fi://tcp;ofi_rxm/0a0b/x"}) {
    st = tcp.t().Connect(junk, nullptr, &conn);
    EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << junk << ": " << st.ToString();
  }
  shm_ctx->t().CloseListener(l);
  delete shm_ctx;
}

// --- data paths -------------------------------------------------------------------

// 64 MiB in one segment (plus an inline one), received into a placed
// buffer, checked byte for byte; then a discard of the same shape, after
// which the connection still works.
void MoveLargeMessage(Ctx* a, Ctx* b) {
  Link link;
  ASSERT_TRUE(Connect(a, b, &link));
  std::vector<uint8_t> big(64 * kMiB), small(100), got(64 * kMiB);
  FillPattern(big.data(), big.size(), 64);
  FillPattern(small.data(), small.size(), 7);
  ASSERT_TRUE(SendMessage(b, link.client, "hdr-64m",
                          {{small.data(), small.size()}, {big.data(), big.size()}},
                          Cookie(1))
                  .ok());
  Event arrival;
  ferry_status_t st =
      PlaceNext(a, b, link.server, {{nullptr, 0}, {got.data(), got.size()}}, &arrival);
  ASSERT_EQ(st, FERRY_OK);
  ASSERT_EQ(arrival.header, "hdr-64m");
  ASSERT_EQ(arrival.segments.size(), 2u);
  EXPECT_TRUE(arrival.segments[0].is_inline);
  EXPECT_EQ(arrival.segments[0].bytes,
            std::string(reinterpret_cast<char*>(small.data()), small.size()));
  EXPECT_FALSE(arrival.segments[1].is_inline);
  EXPECT_EQ(arrival.segments[1].length, 64 * kMiB);
  EXPECT_EQ(std::memcmp(big.data(), got.data(), big.size()), 0)
      << "the 64 MiB segment differs";
  ASSERT_TRUE(PumpUntil({a, b}, [&] { return b->Has(FERRY_EV_SEND_DONE, link.client); }));
  EXPECT_EQ(b->Take(FERRY_EV_SEND_DONE, link.client).status, FERRY_OK);

  // discard(): nothing is read, the sender still completes.
  ASSERT_TRUE(
      SendMessage(b, link.client, "dropped", {{big.data(), big.size()}}, Cookie(2)).ok());
  ASSERT_TRUE(PumpUntil({a, b}, [&] { return a->Has(FERRY_EV_ARRIVAL, link.server); }));
  Event dropped = a->Take(FERRY_EV_ARRIVAL, link.server);
  ASSERT_TRUE(a->t().Discard(link.server, dropped.msg_id).ok());
  ASSERT_TRUE(PumpUntil({a, b}, [&] { return b->Has(FERRY_EV_SEND_DONE, link.client); }));
  EXPECT_EQ(b->Take(FERRY_EV_SEND_DONE, link.client).status, FERRY_OK);

  // And a third message of another size arrives intact.
  std::vector<uint8_t> mid(3 * kMiB + 17), got_mid(3 * kMiB + 17);
  FillPattern(mid.data(), mid.size(), 99);
  ASSERT_TRUE(
      SendMessage(b, link.client, "mid", {{mid.data(), mid.size()}}, Cookie(3)).ok());
  ASSERT_EQ(PlaceNext(a, b, link.server, {{got_mid.data(), got_mid.size()}}), FERRY_OK);
  EXPECT_EQ(std::memcmp(mid.data(), got_mid.data(), mid.size()), 0);
  CloseLink(a, b, link);
}

TEST_P(FabricProvider, RmaReadPathMoves64MiB) {
  Params p({{"provider", provider()}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_NE(a.t().description().find("by RMA read"), std::string::npos)
      << a.t().description();
  MoveLargeMessage(&a, &b);
}

TEST_P(FabricProvider, MessageFallbackMoves64MiB) {
  Params p({{"provider", provider()}, {"rma", "off"}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_NE(a.t().description().find("chunked messages (rma=off)"), std::string::npos)
      << a.t().description();
  EXPECT_FALSE(a.t().info().caps & FERRY_CAP_ZERO_COPY_RECV);
  MoveLargeMessage(&a, &b);
}

TEST_P(FabricProvider, RmaSenderAndFallbackReceiverAgreeOnMessages) {
  // One side without RMA: both fall back to chunked messages for that
  // connection (the limits exchanged in CONNECT/ACCEPT say so).
  Ctx* with_rma;
  {
    Params p({{"provider", provider()}});
    with_rma = new Ctx();
  }
  Params p({{"provider", provider()}, {"rma", "off"}});
  Ctx without;
  ASSERT_TRUE(with_rma->ok()) << with_rma->status().ToString();
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  Link link;
  ASSERT_TRUE(Connect(&without, with_rma, &link));
  std::vector<uint8_t> data(5 * kMiB), got(5 * kMiB);
  FillPattern(data.data(), data.size(), 5);
  ASSERT_TRUE(
      SendMessage(with_rma, link.client, "h", {{data.data(), data.size()}}, Cookie(1))
          .ok());
  ASSERT_EQ(PlaceNext(&without, with_rma, link.server, {{got.data(), got.size()}}),
            FERRY_OK);
  EXPECT_EQ(std::memcmp(data.data(), got.data(), data.size()), 0);
  CloseLink(&without, with_rma, link);
  delete with_rma;
}

// A larger eager_size than the default, with a 16 KiB segment sent inline:
// the frame is over 16 KiB, above ofi_rxm's own eager limit
// (FI_OFI_RXM_BUFFER_SIZE), so rxm moves it by segmentation or rendezvous
// inside the provider. Such a send completes before its last bytes have
// left: they go out on later progress() calls, which PumpUntil keeps making
// on both sides, as the core's progress loop does.
TEST_P(FabricProvider, InlineSegmentInAnEagerFrameAboveSixteenKiBArrives) {
  Params p(
      {{"provider", provider()}, {"eager_size", "32768"}, {"max_inline_size", "16384"}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  Link link;
  ASSERT_TRUE(Connect(&a, &b, &link));
  for (uint64_t size : {uint64_t{16384}, uint64_t{16384 - 200}, uint64_t{9000}}) {
    std::vector<uint8_t> data(size), got(size);
    FillPattern(data.data(), data.size(), size);
    ASSERT_TRUE(
        SendMessage(&b, link.client, "h", {{data.data(), data.size()}}, Cookie(size))
            .ok());
    ASSERT_TRUE(PumpUntil(
        {&a, &b}, [&] { return a.Has(FERRY_EV_ARRIVAL, link.server); },
        std::chrono::seconds(10)))
        << size << "-byte segment: no arrival within 10 s (" << a.t().description()
        << ")";
    Event arrival;
    ASSERT_EQ(PlaceNext(&a, &b, link.server, {{got.data(), got.size()}}, &arrival),
              FERRY_OK);
    ASSERT_EQ(arrival.segments.size(), 1u);
    ASSERT_EQ(arrival.segments[0].length, size);
    if (arrival.segments[0].is_inline) {  // place() leaves inline bytes to the host
      std::memcpy(got.data(), arrival.segments[0].bytes.data(), size);
    }
    EXPECT_EQ(std::memcmp(data.data(), got.data(), size), 0) << size;
    ASSERT_TRUE(
        PumpUntil({&a, &b}, [&] { return b.Has(FERRY_EV_SEND_DONE, link.client); }));
    EXPECT_EQ(b.Take(FERRY_EV_SEND_DONE, link.client).status, FERRY_OK);
  }
  CloseLink(&a, &b, link);
}

// --- registration and mr_mode ------------------------------------------------------

// Host registrations (the core's buffer pools) on both sides, with the
// segments at offsets inside them: the remote address is an offset into the
// registration without FI_MR_VIRT_ADDR (tcp;ofi_rxm) and a virtual address
// with it (shm), so a wrong choice reads the wrong bytes.
void RegisteredRoundTrips(Ctx* a, Ctx* b) {
  Link link;
  ASSERT_TRUE(Connect(a, b, &link));
  const uint64_t size = 9 * kMiB;
  std::vector<uint8_t> pool(size + 3 * kMiB), dst_pool(size + 2 * kMiB);
  ferry_mr_t* src_mr = Register(b, pool.data(), pool.size(), FERRY_ACCESS_SEND);
  ferry_mr_t* dst_mr = Register(a, dst_pool.data(), dst_pool.size(), FERRY_ACCESS_RECV);
  ASSERT_NE(src_mr, nullptr);
  ASSERT_NE(dst_mr, nullptr);
  for (uint64_t round = 0; round < 3; ++round) {
    uint8_t* src = pool.data() + round * kMiB + 13;
    uint8_t* dst = dst_pool.data() + (2 - round) * 512 * 1024 + 5;
    FillPattern(src, size, 100 + round);
    std::memset(dst, 0, size);
    ASSERT_TRUE(
        SendMessage(b, link.client, "reg", {{src, size}}, Cookie(round + 1), {src_mr})
            .ok());
    ASSERT_EQ(PlaceNext(a, b, link.server, {{dst, size}}, nullptr, {dst_mr}), FERRY_OK);
    EXPECT_EQ(std::memcmp(src, dst, size), 0) << "round " << round;
    ASSERT_TRUE(
        PumpUntil({a, b}, [&] { return b->Has(FERRY_EV_SEND_DONE, link.client); }));
    EXPECT_EQ(b->Take(FERRY_EV_SEND_DONE, link.client).status, FERRY_OK);
  }
  // A segment only partly inside its registration is registered per
  // operation instead (the handle cannot cover it).
  uint8_t* edge = pool.data() + pool.size() - kMiB;
  std::vector<uint8_t> outside(3 * kMiB), got(3 * kMiB);
  FillPattern(outside.data(), outside.size(), 77);
  ASSERT_TRUE(SendMessage(b, link.client, "edge", {{outside.data(), outside.size()}},
                          Cookie(9), {src_mr})
                  .ok());
  ASSERT_EQ(PlaceNext(a, b, link.server, {{got.data(), got.size()}}, nullptr, {dst_mr}),
            FERRY_OK);
  EXPECT_EQ(std::memcmp(outside.data(), got.data(), got.size()), 0);
  (void)edge;
  CloseLink(a, b, link);
  b->t().Dereg(src_mr);
  a->t().Dereg(dst_mr);
}

TEST_P(FabricProvider, HostRegistrationsAtOffsets) {
  Params p({{"provider", provider()}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  RegisteredRoundTrips(&a, &b);
}

TEST_P(FabricProvider, ForcedMrLocalRegistersEveryLocalBuffer) {
  // EFA takes FI_MR_LOCAL descriptors: force the plugin to honour it here, so bounce
  // buffers, per-operation registrations of read destinations and the
  // descriptors of host handles are all exercised without EFA hardware.
  Params p({{"provider", provider()}, {"force_mr_local", "1"}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_NE(a.t().description().find("+FI_MR_LOCAL forced"), std::string::npos)
      << a.t().description();
  RegisteredRoundTrips(&a, &b);
  MoveLargeMessage(&a, &b);
}

TEST(FabricRegistration, BadRegistrationsAreRefused) {
  Params p({{"provider", "tcp;ofi_rxm"}});
  Ctx ctx;
  ASSERT_TRUE(ctx.ok());
  ferry_reg_args_t r{};
  r.struct_size = FERRY_REG_ARGS_STRUCT_SIZE;
  r.data = nullptr;
  r.length = 10;
  ferry_mr_t* mr = nullptr;
  ferry::Status st = ctx.t().Reg(r, &mr);
  EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << st.ToString();
  EXPECT_FALSE(st.message().empty());
  // Device memory without FI_HMEM: refused with the reason.
  std::vector<uint8_t> buf(4096);
  r.data = buf.data();
  r.length = buf.size();
  r.device = {FERRY_DEVICE_CUDA, 0};
  st = ctx.t().Reg(r, &mr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("FI_HMEM"), std::string::npos) << st.message();
  // A registration that is never deregistered is released by fini.
  r.device = {FERRY_DEVICE_CPU, 0};
  ASSERT_TRUE(ctx.t().Reg(r, &mr).ok());
}

// --- connections -------------------------------------------------------------------

TEST_P(FabricProvider, PeerCloseDeliversWhatWasSentThenBreaks) {
  Params p({{"provider", provider()}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  Link link;
  ASSERT_TRUE(Connect(&a, &b, &link));
  std::vector<std::string> bodies = {"one", "two", "three"};
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_TRUE(SendMessage(&b, link.client, bodies[i], {}, Cookie(i + 1)).ok());
  }
  b.t().Close(link.client);
  // The three messages arrive in order, then CONN_BROKEN with PEER_GONE.
  for (size_t i = 0; i < bodies.size(); ++i) {
    ASSERT_TRUE(
        PumpUntil({&a, &b}, [&] { return a.Has(FERRY_EV_ARRIVAL, link.server); }));
    Event e = a.Take(FERRY_EV_ARRIVAL, link.server);
    EXPECT_EQ(e.header, bodies[i]);
    if (i + 1 < bodies.size()) {
      EXPECT_FALSE(a.Has(FERRY_EV_CONN_BROKEN, link.server))
          << "CONN_BROKEN before every message was delivered";
    }
    ASSERT_TRUE(a.t().Discard(link.server, e.msg_id).ok());
  }
  ASSERT_TRUE(
      PumpUntil({&a, &b}, [&] { return a.Has(FERRY_EV_CONN_BROKEN, link.server); }));
  Event broken = a.Take(FERRY_EV_CONN_BROKEN, link.server);
  EXPECT_EQ(broken.status, FERRY_PEER_GONE);
  EXPECT_NE(broken.message.find("closed"), std::string::npos) << broken.message;
  // A send on the broken side is refused for good.
  ferry::Status st = SendMessage(&a, link.server, "late", {}, Cookie(9));
  EXPECT_EQ(st.code(), FERRY_PEER_GONE) << st.ToString();
  a.t().Close(link.server);
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] {
    return a.Has(FERRY_EV_CLOSED, link.server) && b.Has(FERRY_EV_CLOSED, link.client);
  }));
}

// Only rx_posted of the rx_buffers receive buffers are posted at a time
// (receive.cc). A burst far larger than both, sent before the receiver makes
// any progress, waits in the provider and in spilled copies, and arrives
// whole and in order.
TEST_P(FabricProvider, ABurstBeyondThePostedReceivesArrivesWholeAndInOrder) {
  Params p({{"provider", provider()}, {"rx_buffers", "16"}, {"rx_posted", "8"}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_NE(a.t().description().find("receive buffers 8 posted of 16"), std::string::npos)
      << a.t().description();
  Link link;
  ASSERT_TRUE(Connect(&a, &b, &link));
  constexpr int kCount = 300;
  constexpr size_t kBytes = 2000;
  std::vector<std::vector<uint8_t>> bodies(kCount, std::vector<uint8_t>(kBytes));
  for (int i = 0; i < kCount; ++i) {
    FillPattern(bodies[i].data(), kBytes, static_cast<uint64_t>(i));
    ASSERT_TRUE(SendMessage(&b, link.client, "m" + std::to_string(i),
                            {{bodies[i].data(), kBytes}}, Cookie(i + 1))
                    .ok());
  }
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return a.Has(FERRY_EV_ARRIVAL, link.server); }))
        << "message " << i << " of " << kCount << " never arrived";
    Event e = a.Take(FERRY_EV_ARRIVAL, link.server);
    ASSERT_EQ(e.header, "m" + std::to_string(i));
    ASSERT_EQ(e.segments.size(), 1u);
    ASSERT_TRUE(e.segments[0].is_inline);
    ASSERT_EQ(e.segments[0].bytes, std::string(bodies[i].begin(), bodies[i].end()))
        << "message " << i;
    ASSERT_TRUE(a.t().Discard(link.server, e.msg_id).ok());
  }
  CloseLink(&a, &b, link);
}

// send() tries a small message on its latency path before anything else
// (send.cc: TrySendSmall), which checks only what that path needs. Every
// malformed small send must still get ValidateSend's error, send nothing
// and queue no SEND_DONE: the next good message is the first to arrive.
TEST_P(FabricProvider, MalformedSmallSendsAreRefusedAndSendNothing) {
  Params p({{"provider", provider()}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  Link link;
  ASSERT_TRUE(Connect(&a, &b, &link));
  const char header[8] = {'h', 'e', 'a', 'd', 'e', 'r', '!', '\0'};
  uint8_t body[16] = {};
  struct {
    uint32_t magic = 0x12345678;  // not a registration of the plugin's
  } foreign_mr;
  auto send = [&](uint64_t header_len, const void* header_ptr,
                  std::vector<ferry_segment_t> segs, uint32_t num_segments,
                  bool null_segments) {
    ferry_send_args_t args{};
    args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
    args.header = header_ptr;
    args.header_len = header_len;
    args.num_segments = num_segments;
    args.segments = null_segments ? nullptr : segs.data();
    args.segment_stride = sizeof(ferry_segment_t);
    args.user_data = Cookie(0xBAD);
    return b.t().Send(link.client, args);
  };
  auto seg = [](const void* data, uint64_t length, ferry_mr_t* mr = nullptr) {
    return ferry_segment_t{
        FERRY_SEGMENT_STRUCT_SIZE, 0, data, length, {FERRY_DEVICE_CPU, 0}, mr,
        FERRY_STREAM_READY};
  };
  const uint32_t max_segments = b.t().info().max_segments;
  struct Case {
    const char* what;
    ferry::Status st;
    ferry_status_t want;
  } cases[] = {
      {"a NULL header of 8 bytes", send(8, nullptr, {}, 0, false),
       FERRY_INVALID_ARGUMENT},
      {"16 bytes at a NULL data pointer", send(8, header, {seg(nullptr, 16)}, 1, false),
       FERRY_INVALID_ARGUMENT},
      {"a registration handle of another plugin",
       send(8, header, {seg(body, 16, reinterpret_cast<ferry_mr_t*>(&foreign_mr))}, 1,
            false),
       FERRY_INVALID_ARGUMENT},
      {"one segment and a NULL segment array", send(8, header, {}, 1, true),
       FERRY_INVALID_ARGUMENT},
      {"max_segments + 1 empty segments",
       send(8, header, std::vector<ferry_segment_t>(max_segments + 1, seg(body, 0)),
            max_segments + 1, false),
       FERRY_RESOURCE_EXHAUSTED},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.st.code(), c.want) << c.what << ": " << c.st.ToString();
    EXPECT_FALSE(c.st.message().empty()) << c.what;
  }
  FillPattern(body, sizeof body, 7);
  ASSERT_TRUE(
      SendMessage(&b, link.client, "good", {{body, sizeof body}}, Cookie(1)).ok());
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return a.Has(FERRY_EV_ARRIVAL, link.server); }));
  Event e = a.Take(FERRY_EV_ARRIVAL, link.server);
  EXPECT_EQ(e.header, "good");
  ASSERT_EQ(e.segments.size(), 1u);
  EXPECT_EQ(e.segments[0].bytes, std::string(body, body + sizeof body));
  ASSERT_TRUE(a.t().Discard(link.server, e.msg_id).ok());
  ASSERT_TRUE(
      PumpUntil({&a, &b}, [&] { return b.Has(FERRY_EV_SEND_DONE, link.client); }));
  EXPECT_EQ(b.Take(FERRY_EV_SEND_DONE, link.client).user_data, Cookie(1))
      << "a refused send() queued a SEND_DONE";
  EXPECT_FALSE(b.Has(FERRY_EV_SEND_DONE, link.client));
  CloseLink(&a, &b, link);
}

TEST_P(FabricProvider, ConnectToAClosedListenerIsRefused) {
  Params p({{"provider", provider()}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  ferry_listener_t* l = nullptr;
  ASSERT_TRUE(a.t().Listen("", nullptr, &l).ok());
  std::string address = a.t().ListenerAddress(l).value();
  a.t().CloseListener(l);
  ferry_conn_t* conn = nullptr;
  ASSERT_TRUE(b.t().Connect(address, Cookie(5), &conn).ok());
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return b.Has(FERRY_EV_CONNECTED, conn); }));
  Event e = b.Take(FERRY_EV_CONNECTED, conn);
  EXPECT_EQ(e.status, FERRY_UNAVAILABLE) << e.message;
  EXPECT_NE(e.message.find("refused"), std::string::npos) << e.message;
  EXPECT_EQ(e.user_data, Cookie(5));
  b.t().Close(conn);
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return b.Has(FERRY_EV_CLOSED, conn); }));
}

TEST_P(FabricProvider, SendingToAFinishedContextInThisProcessIsPeerGone) {
  // The server closes and is fini()ed before the client has seen the
  // DISCONNECT; the client then sends. libfabric 1.17's shm provider would
  // dereference the closed endpoint's unmapped region here (a crash): the
  // plugin must see the in-process peer is gone and say PEER_GONE.
  Params p({{"provider", provider()}});
  auto a = std::make_unique<Ctx>();
  Ctx b;
  ASSERT_TRUE(a->ok() && b.ok());
  Link link;
  ASSERT_TRUE(Connect(a.get(), &b, &link));
  a->t().Close(link.server);
  ASSERT_TRUE(PumpUntil({a.get()}, [&] { return a->Has(FERRY_EV_CLOSED, link.server); }));
  a->t().CloseListener(link.listener);
  a.reset();  // fini
  std::vector<uint8_t> big(2 * kMiB);
  ferry::Status st =
      SendMessage(&b, link.client, "after", {{big.data(), big.size()}}, Cookie(1));
  if (st.ok()) {
    ASSERT_TRUE(PumpUntil({&b}, [&] { return b.Has(FERRY_EV_SEND_DONE, link.client); }));
    Event done = b.Take(FERRY_EV_SEND_DONE, link.client);
    EXPECT_EQ(done.status, FERRY_PEER_GONE) << done.message;
  } else {
    EXPECT_EQ(st.code(), FERRY_PEER_GONE) << st.ToString();
  }
  ASSERT_TRUE(PumpUntil({&b}, [&] { return b.Has(FERRY_EV_CONN_BROKEN, link.client); }));
  EXPECT_EQ(b.Take(FERRY_EV_CONN_BROKEN, link.client).status, FERRY_PEER_GONE);
  b.t().Close(link.client);
  ASSERT_TRUE(PumpUntil({&b}, [&] { return b.Has(FERRY_EV_CLOSED, link.client); }));
}

TEST(FabricWakeup, TcpWakeupFdSignalsArrivalAndGoesQuiet) {
  Params p({{"provider", "tcp;ofi_rxm"}});
  Ctx a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  Link link;
  ASSERT_TRUE(Connect(&a, &b, &link));
  const int fd = a.t().info().wakeup_fd;
  ASSERT_GE(fd, 0);
  auto readable = [fd](int timeout_ms) {
    pollfd pfd{fd, POLLIN, 0};
    return poll(&pfd, 1, timeout_ms) == 1;
  };
  // Drain: once progress() has nothing left, the fd goes quiet.
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return a.PollOnce() == 0 && !readable(0); }));
  ASSERT_TRUE(SendMessage(&b, link.client, "wake", {}, Cookie(1)).ok());
  // Only b is progressed: a's fd must become readable by itself (sleeping
  // on it, bounded by the poll timeout).
  bool woke = false;
  for (int i = 0; i < 200 && !woke; ++i) {
    b.PollOnce();
    woke = readable(50);
  }
  EXPECT_TRUE(woke) << "the wakeup fd stayed quiet with a message waiting";
  ASSERT_TRUE(PumpUntil({&a, &b}, [&] { return a.Has(FERRY_EV_ARRIVAL, link.server); }));
  Event e = a.Take(FERRY_EV_ARRIVAL, link.server);
  ASSERT_TRUE(a.t().Discard(link.server, e.msg_id).ok());
  CloseLink(&a, &b, link);
}

}  // namespace
}  // namespace ferry_fabric_test
