// ferry::Engine: the worker's connections and its progress loop.
//
// It owns the loaded transports, their listeners and connections, runs the
// authenticated handshake on every connection, keeps one connection per
// peer (the lower id's connection wins a race) and a second one where device
// messages take another transport (route.h), numbers and deduplicates
// messages per peer, stages device messages through host memory for a peer
// no device transport reaches, sends heartbeats and declares a silent peer gone. What
// messages *mean* is the sink's business (the Agent): the engine only hands
// each authenticated, deduplicated message up.
//
// Threading: see progress_driver.h for who drives the transports and how
// waiters sleep. Sink callbacks run after the engine's locks are released,
// so a handler may call back into the engine (a nested rpc_sync pumps
// progress itself) without deadlock; those of one source (a peer, a store
// connection) run in the order its events arrived (delivery_order.h).
//
// One class, several files. Connections and peers are guarded by one lock
// (mu_) because nearly every event touches both: a connection's handshake
// decides which connection its peer uses, a peer's death closes its
// connections, a closing connection detaches from its peer. Separate
// objects with locks of their own would need a lock order between them on
// every event; so the state stays in one class and its methods are split by
// concern instead, one file each:
//   engine.cc            start, stop, the pump, timers
//   members.cc           the peer table: members, routing, sending to a member,
//                        a peer's connection failing, a peer gone
//   store_connections.cc the rendezvous store's connections (either side)
//   send.cc              framing one message onto a connection, closing one
//   arrival.cc           transport events: accepts, arrivals, receive placement
//   handshake.cc         the authenticated handshake (HELLO .. READY / REJECT)
//   heartbeats.cc        heartbeats and the silence that declares a peer gone
// The data they share is in connection.h and peer.h.
#pragma once

#include "common/limits.h"
#include "common/status.h"
#include "engine/delivery_order.h"
#include "engine/device_memory.h"
#include "engine/message.h"
#include "engine/progress_driver.h"
#include "engine/route.h"
#include "engine/timer_list.h"
#include "loader/plugin_loader.h"
#include "transport/transport.h"
#include "wire/messages.h"

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ferry {

using Clock = std::chrono::steady_clock;

struct TransportSlot;
struct Conn;
struct Peer;

struct EngineOptions {
  std::string job;
  std::string secret;
  std::vector<std::string> transports;  // plugin names to load ("tcp", ...)
  std::string listen_address;           // "" = each plugin's default
  // "auto": a transport that fails to load or open is skipped (logged),
  // not fatal.
  bool skip_unusable = false;
  bool busy_poll = false;
  std::chrono::milliseconds peer_timeout{3000};
  // How long a sleeping-mode waiter spins before it sleeps on the wakeup fds.
  std::chrono::microseconds spin{50};
  // Where received device tensors are allocated (else the device
  // transport's allocator).
  std::optional<AppDeviceAllocator> device_allocator;
  // The engine enforces max_message_size, max_queued_bytes_per_connection
  // (counting; the agent waits on it), max_connections and the handshake
  // timeout (admission.cc).
  Limits limits;
};

class EngineSink {
 public:
  virtual ~EngineSink() = default;
  // An authenticated, deduplicated message from member `from`.
  virtual void OnMessage(PeerKey from, std::unique_ptr<InMessage> msg) = 0;
  // A control message that was a duplicate (already handled): the sink
  // re-acknowledges it, because the first acknowledgement may have been lost.
  virtual void OnDuplicateControl(PeerKey from, const InMessage& msg) = 0;
  // A store-protocol message on connection `conn` (a store client before it
  // joined, or the store answering this worker).
  virtual void OnStoreMessage(uint64_t conn, std::unique_ptr<InMessage> msg) = 0;
  // The connection to member `peer` failed or went silent: it is gone.
  // `left`: it said goodbye first (a graceful leave, not a death).
  virtual void OnPeerGone(PeerKey peer, const Status& why, bool left) = 0;
  // A store connection (either side) closed or failed.
  virtual void OnStoreConnGone(uint64_t conn, const Status& why) = 0;
};

class Engine : private ProgressDriver::Pump {
 public:
  Engine(EngineOptions options, EngineSink* sink);
  ~Engine();  // Stop()s
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Loads and opens the transports and listens on each. Fails with the
  // loader's message (what was tried, what exists) if one is missing.
  Status Start();
  // Starts the background progress thread (after the sink is ready).
  void StartLoop();
  // Closes every connection, stops the background thread, closes transports.
  // Bounded: waits at most `grace` for sends in flight.
  void Stop(std::chrono::milliseconds grace);

  // This worker's endpoints (plugin, address, domain, priority).
  std::vector<wire::Endpoint> endpoints() const;
  void SetSelf(uint64_t id, uint64_t incarnation, const std::string& name);
  uint64_t self_id() const { return self_id_.load(); }

  // Members the engine may connect to. Learning a newer incarnation of a
  // known id forgets the old one (it is gone).
  void AddMember(const wire::MemberRecord& record);
  // `left`: a graceful leave (reported as such), not a death.
  void RemoveMember(uint64_t id, const Status& why, bool left);
  // The plugin the connection to `id` uses ("" when not connected yet).
  std::string RouteTo(uint64_t id) const;
  // What the last message with device tensors to `id` took: a plugin's
  // name, or "staged" (copied through host memory); "" when none went yet.
  std::string DeviceRouteTo(uint64_t id) const;
  // This worker's device memory services (after Start; NULL when no loaded
  // transport offers them and the application set no allocator).
  const std::shared_ptr<DeviceMemory>& device_memory() const { return device_memory_; }
  // Whether a message may carry memory of FERRY_MEM_* `kind`: some member
  // transport moves it, or can stage it through host memory.
  bool CanCarry(uint64_t kind) const;
  // Picks the plugin for a member's host messages: the highest priority
  // plugin both share in one domain (route.h).
  StatusOr<wire::Endpoint> ChooseEndpoint(const wire::MemberRecord& r) const;

  // Sends to member `id` (connecting first if needed; messages wait in order
  // until the connection is authenticated). Fails at once if `id` is not a
  // known member or is gone; `msg` is consumed either way.
  Status SendToMember(uint64_t id, std::unique_ptr<OutMessage> msg);
  // Store protocol: connect to a store (client side), listen as the store,
  // send on a store connection.
  // Bytes of messages to member `id` not yet written to its connection
  // (0 for an unknown member): the agent's calls wait while this is at
  // max_queued_bytes_per_connection.
  uint64_t QueuedBytesTo(uint64_t id) const;
  StatusOr<uint64_t> ConnectStore(const std::string& address);
  Status ListenStore(const std::string& address, std::string* bound);
  Status SendOnConn(uint64_t conn, std::unique_ptr<OutMessage> msg);
  void CloseConn(uint64_t conn);

  // Drives progress once if no other thread is; runs sink callbacks.
  // Returns true if anything happened.
  bool PumpOnce() override;
  // Pumps (or sleeps on the wakeup fds, or yields to the thread that pumps)
  // until `done()` or `deadline`. Returns done().
  // A sink callback that waits first hands its source's later deliveries
  // on (delivery_order.h).
  bool WaitUntil(const std::function<bool()>& done, Clock::time_point deadline) {
    DeliveryOrder::BeforeWait();
    return driver_.WaitUntil(done, deadline);
  }
  // Wakes threads sleeping in WaitUntil / the loop (state changed elsewhere).
  void Kick() { driver_.Kick(); }
  // Call after the state `done()` watches changed on a thread that is not
  // pumping (a reply from another thread): wakes WaitUntil's sleepers.
  void NotifyWaiters() { driver_.NotifyWaiters(); }

  bool busy_poll() const { return options_.busy_poll; }
  // Adds a periodic job run by whoever pumps (RRef control retries, call
  // deadlines). Runs without locks; must not block.
  void AddTimer(std::chrono::milliseconds period, std::function<void()> fn);

  struct Stats {
    uint64_t connections = 0;
    uint64_t refused = 0;  // handshakes refused (bad secret, wrong job, ...)
    // Messages with device tensors sent over a device transport; staged
    // through host memory (and those bytes).
    uint64_t device_messages = 0;
    uint64_t staged_messages = 0;
    uint64_t staged_bytes = 0;
  };
  Stats stats() const;
  // For the debug dump (agent.h, DebugDump): transports, peers (state,
  // transport, last heard, queued messages), connections mid-handshake and
  // the store's (debug_dump.cc). Takes the engine's lock once.
  nlohmann::json DebugDump() const;

 private:
  using Action = std::function<void()>;
  // The store always speaks tcp: its address is host:port, as torch's
  // MASTER_ADDR/PORT is.
  static constexpr const char* kStorePlugin = "tcp";

  // All private methods run with mu_ held unless named *Unlocked.
  Status StartTransport(const std::string& name);
  // arrival.cc
  void ProcessEvent(TransportSlot& slot, const ferry_event_t& ev,
                    std::vector<Action>* actions);
  void OnPlaceDone(const ferry_event_t& ev, std::vector<Action>* actions);
  void OnAccepted(TransportSlot& slot, const ferry_event_t& ev);
  void OnArrival(Conn* c, const ferry_event_t& ev, std::vector<Action>* actions);
  void PlaceSegments(Conn* c, const ferry_event_t& ev, std::unique_ptr<InMessage> msg,
                     bool body_in_segment0, std::vector<Action>* actions);
  void OnMessageComplete(Conn* c, std::unique_ptr<InMessage> msg,
                         std::vector<Action>* actions);
  void DeliverFromMember(Conn* c, std::unique_ptr<InMessage> msg,
                         std::vector<Action>* actions);
  // handshake.cc
  void OnConnected(Conn* c, const ferry_event_t& ev, std::vector<Action>* actions);
  void OnHandshake(Conn* c, const InMessage& msg, std::vector<Action>* actions);
  void OnReject(Conn* c, const wire::Reject& reject, std::vector<Action>* actions);
  void OnHello(Conn* c, wire::Reader& r, std::vector<Action>* actions);
  // False when `c` lost a connect race or is a replaced incarnation (it
  // was refused).
  bool AdmitMemberConn(Conn* c, std::vector<Action>* actions);
  void OnChallenge(Conn* c, wire::Reader& r, std::vector<Action>* actions);
  void OnAuth(Conn* c, wire::Reader& r, std::vector<Action>* actions);
  void MakeReady(Conn* c, std::vector<Action>* actions);
  Peer* PeerForReadyConn(Conn* c, std::vector<Action>* actions);
  // A new Peer adopts the connections it opened to us that are still in
  // their handshake (they arrived before the peer was known).
  void AttachHandshakingConns(Peer* p);
  // FERRY_STREAM_PER_THREAD names the calling thread's default stream; a
  // message sent later by another thread would order after the wrong one.
  // Rewrites it to the legacy default stream, which orders after the work
  // of every blocking stream, per-thread default streams included.
  static void PinStreamsToCaller(OutMessage* msg);
  // The memory kinds (FERRY_MEM_*) a message's segments are in.
  static uint64_t NeededKinds(const OutMessage& msg);
  void MakeDeviceConnReady(Conn* c, Peer* p);
  void RejectAndClose(Conn* c, ferry_status_t code, const std::string& why,
                      std::vector<Action>* actions);
  // send.cc
  Status SendOnConnLocked(Conn* c, std::unique_ptr<OutMessage> msg, uint64_t seq);
  Status SendHandshake(Conn* c, wire::Kind kind,
                       const std::function<void(wire::Writer&)>& body);
  void CloseConnLocked(Conn* c);
  // members.cc
  std::vector<route::Local> LocalRoutes() const;
  // Sends a numbered member message on the primary (or queues it, connecting).
  Status SendOnPrimaryLocked(Peer* p, uint64_t seq, std::unique_ptr<OutMessage> msg);
  Status SendDeviceMessage(uint64_t id, std::unique_ptr<OutMessage> msg, uint64_t needed);
  // Copies `msg`'s device tensors into host memory (no lock held).
  Status StageThroughHost(OutMessage* msg, uint64_t* bytes);
  // Opens the primary connection, or (device_ep) the device connection.
  Status ConnectToPeer(Peer* p, const wire::Endpoint* device_ep = nullptr);
  void DeviceConnFailed(Conn* c, const Status& why, std::vector<Action>* actions);
  void ConnFailed(Conn* c, const Status& why, std::vector<Action>* actions);
  void PeerGone(Peer* p, const Status& why, std::vector<Action>* actions);
  // admission.cc: the limits (engine.h, EngineOptions::limits).
  // RESOURCE_EXHAUSTED naming max_message_size for a message too large.
  Status CheckMessageSize(const OutMessage& msg) const;
  // Counts `msg` against `p`'s queued bytes until it is gone.
  static void ChargeQueuedBytes(Peer* p, OutMessage* msg);
  // False (and `c` failed, its arrival discarded, logged) when the arrival
  // announces more than max_message_size: nothing of it is allocated.
  bool ArrivalWithinLimit(Conn* c, const ferry_event_t& ev, std::vector<Action>* actions);
  // Closes the connection just accepted when it is one too many.
  void RefuseIfOverConnectionLimit(Conn* c);
  std::chrono::milliseconds HandshakeTimeout() const;
  // engine.cc, heartbeats.cc
  // How often heartbeats and handshake deadlines are checked.
  std::chrono::milliseconds HeartbeatCheckInterval() const;
  void RunTimers(Clock::time_point now, std::vector<Action>* actions);
  void HeartbeatTick(Clock::time_point now, std::vector<Action>* actions);
  Conn* FindConn(uint64_t id);
  TransportSlot* SlotNamed(const std::string& name);

  EngineOptions options_;
  EngineSink* sink_;
  PluginLoader loader_;
  std::atomic<uint64_t> self_id_{0};
  uint64_t self_incarnation_ = 0;
  std::string self_name_;

  mutable std::mutex mu_;  // everything below, except where noted
  std::vector<std::unique_ptr<TransportSlot>> slots_;  // fixed after Start
  std::shared_ptr<DeviceMemory> device_memory_;        // fixed after Start
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;    // by conn id
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;    // by member id
  uint64_t next_conn_id_ = 1;
  Stats stats_;
  // Connections refused at max_connections (the log says the first, then
  // every 1000th).
  uint64_t refused_over_limit_ = 0;
  TimerList timers_;
  Clock::time_point next_heartbeat_check_{};
  // Sends and places posted and not yet completed: if the transport is
  // finalised with some outstanding, Stop() frees them (tensor deleters run
  // exactly once either way).
  InFlightSends in_flight_;
  std::set<void*> places_in_flight_;
  // HELLOs from members that came before this worker knew its own id (a
  // peer heard of our join from the store before we did): answered by
  // SetSelf.
  std::vector<std::pair<uint64_t, std::unique_ptr<InMessage>>> early_hellos_;

  // Sink callbacks of one source run in event order; its own lock.
  DeliveryOrder order_;
  std::mutex progress_mu_;  // held by the one thread driving transports
  ProgressDriver driver_;   // not under mu_: it has its own synchronisation
};

}  // namespace ferry
