// The raw libfabric floor: the benchmark's ping-pong written directly on one
// libfabric provider (the one ferry's fabric plugin uses in the same run),
// with nothing a transport could leave out. One FI_EP_RDM endpoint per side,
// every buffer registered once up front (honouring the provider's mr_mode),
// and per message exactly one operation:
//   rma (default when the provider has FI_RMA): one fi_writedata of the
//       whole message straight into the peer's registered buffer; its remote
//       CQ data is the arrival (fi_inject_writedata up to inject_size);
//   msg: one fi_tsend of the whole message into a receive the peer posted
//       ahead (fi_tinject up to inject_size).
// Completions are read by polling the CQ: spinning in busy mode, sleeping on
// the CQ's wait fd (or backing off without one) in sleep mode, as ferry's
// plugin does. Set-up (names, buffer keys) uses tagged messages apart from
// the data, and is not timed.
#pragma once

#include "common/status.h"
#include "transport/buffers.h"
#include "transport/pingpong.h"
#include "transport/raw_fabric_endpoint.h"

#include <rdma/fabric.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace ferry::bench {

class RawFabricPingPong final : public PingPongClient, public PingPongServer {
 public:
  // Opens an endpoint on `provider` and registers `buffers` (borrowed for
  // the object's life). `path`: "rma", "msg", or "auto" (rma when the
  // provider has it).
  static StatusOr<std::unique_ptr<RawFabricPingPong>> Open(const std::string& provider,
                                                           const std::string& path,
                                                           PollMode mode,
                                                           BufferSet* buffers);
  ~RawFabricPingPong() override;

  // Peer side: the endpoint's name (hex) for the client, then waiting for
  // the client's hello and answering with the keys of the receive ring.
  std::string address() const;
  Status Accept(int timeout_ms);
  // Client side: says hello to the peer at `address` and returns without
  // waiting (the peer accepts only once every reference is connected); its
  // answer, the keys of its buffers, is read before the first exchange.
  Status Connect(const std::string& address);

  Status RoundTrip(uint64_t size) override;
  Status Stream(uint64_t size, uint32_t count, uint32_t window) override;
  Status Echo(uint64_t size) override;
  Status StreamSink(uint64_t size, uint32_t count, uint32_t window) override;
  Status Flush() override;
  LoopCounters counters() const override { return endpoint_->counters(); }

 private:
  enum class OpKind { kSend, kDataRecv, kCtrlRecv };
  // An operation's context: libfabric hands `ctx` back in the completion
  // (FI_CONTEXT/FI_CONTEXT2 providers own its bytes until then).
  struct Op {
    fi_context2 ctx;  // first: op_context points here
    OpKind kind;
  };

  RawFabricPingPong(std::unique_ptr<RawFabricEndpoint> endpoint, BufferSet* buffers)
      : endpoint_(std::move(endpoint)), buffers_(buffers) {}
  Status RegisterBuffers();
  Op* NewOp(OpKind kind);
  // Polls once and handles what completed.
  Status Progress();
  template <typename Done>
  Status WaitFor(Done done);
  // One data message of `size` bytes from `data` to the peer's region
  // `target` (rma) or into its posted receive (msg).
  Status PostData(const uint8_t* data, uint64_t size, void* desc,
                  const RawFabricRegion& target);
  Status PostDataRecv(uint8_t* data, uint64_t capacity, void* desc);
  Status PostCtrlRecv();
  Status SendCtrl(const std::string& bytes, bool wait = true);
  StatusOr<std::string> NextCtrl(int timeout_ms);
  Status WaitSendsDone();
  // Client: reads the peer's answer to the hello, once.
  Status AwaitWelcome();
  // The peer's receive landing (msg path): the next message lands in
  // landing_[next_landing_]; two buffers, so the next one is posted before
  // the echo of this one leaves from it.
  Status PostLandingRecv();

  std::unique_ptr<RawFabricEndpoint> endpoint_;
  BufferSet* buffers_;
  bool rma_ = false;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  std::vector<RawFabricRegion> peer_regions_;  // the peer's ring (rma)

  // Registered local buffers.
  RawFabricRegion send_region_;                // client's send buffer
  std::vector<RawFabricRegion> recv_regions_;  // parallel to buffers_->recv
  std::unique_ptr<Buffer> ctrl_;               // [recv half | send half]
  RawFabricRegion ctrl_region_;
  std::unique_ptr<Buffer> spare_;  // peer, msg path
  RawFabricRegion spare_region_;
  struct Landing {
    uint8_t* data;
    uint64_t capacity;
    void* desc;
  };
  Landing landing_[2] = {};
  uint32_t next_landing_ = 0;

  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;
  uint64_t sends_posted_ = 0, sends_done_ = 0;
  uint64_t data_recvs_posted_ = 0, data_recvs_done_ = 0;
  uint64_t arrivals_ = 0, arrivals_consumed_ = 0;  // rma: remote CQ data
  std::deque<std::string> ctrl_inbox_;
  std::vector<fi_cq_data_entry> entries_;
};

}  // namespace ferry::bench
