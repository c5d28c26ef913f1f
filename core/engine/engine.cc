// ferry::Engine (engine.h): transports, connections, handshake, progress.
#include "engine/engine.h"

#include "common/log.h"
#include "engine/auth.h"
#include "engine/receive_buffers.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace ferry {
namespace {

constexpr const char* kLog = "engine";
constexpr uint32_t kEventBatch = 64;
// The store always speaks tcp: its address is host:port, as torch's
// MASTER_ADDR/PORT is.
constexpr const char* kStorePlugin = "tcp";

inline void CpuRelax() { __builtin_ia32_pause(); }

bool IsHandshake(wire::Kind k) {
  return k == wire::Kind::kHello || k == wire::Kind::kChallenge ||
         k == wire::Kind::kAuth || k == wire::Kind::kReady ||
         k == wire::Kind::kReject;
}

bool IsStoreKind(wire::Kind k) {
  return k == wire::Kind::kStoreJoin || k == wire::Kind::kStoreJoined ||
         k == wire::Kind::kStoreMemberEvent || k == wire::Kind::kStoreLeave;
}

}  // namespace

struct Engine::TransportSlot {
  std::unique_ptr<Transport> transport;
  std::string name;
  bool member = false;  // carries member traffic (else: only the store)
  ferry_listener_t* listener = nullptr;
  std::string address;
  ferry_listener_t* store_listener = nullptr;
  std::vector<ferry_event_t> events;
  // Held around every plugin call when the plugin is not THREAD_SAFE.
  std::unique_ptr<std::mutex> call_mu;
  std::unordered_map<ferry_conn_t*, Conn*> by_handle;
};

struct Engine::Conn {
  enum class State { kConnecting, kHelloSent, kAwaitHello, kChallengeSent,
                     kAuthSent, kReady, kClosed };
  uint64_t id = 0;
  TransportSlot* slot = nullptr;
  ferry_conn_t* handle = nullptr;
  State state = State::kConnecting;
  bool outbound = false;
  bool store = false;  // a store connection (either side)
  wire::Role role = wire::Role::kMember;  // what the connector is
  uint64_t peer_id = 0;                   // expected (outbound) or claimed
  uint64_t peer_incarnation = 0;
  std::string peer_name;
  std::string address;  // outbound: where to; inbound: the peer's, if known
  auth::Nonce my_nonce{};
  auth::Nonce their_nonce{};
  Clock::time_point started{};
  Clock::time_point last_heard{};
  Clock::time_point last_sent{};
  // Store connections queue here until authenticated (members' messages
  // queue on their Peer instead).
  std::deque<std::unique_ptr<OutMessage>> backlog;
  bool broken_reported = false;
};

struct Engine::Peer {
  wire::MemberRecord record;  // endpoints may be empty (learnt from HELLO)
  Conn* conn = nullptr;       // the authenticated connection
  Conn* outbound = nullptr;   // our connect() in progress, if any
  Conn* inbound = nullptr;    // its connection, accepted and mid-handshake
  bool waiting_for_theirs = false;  // we lost the connect race
  std::deque<std::pair<uint64_t, std::unique_ptr<OutMessage>>> backlog;
  uint64_t next_seq = 1;
  // Deduplication: every seq <= floor was seen, and those in `above`.
  uint64_t floor = 0;
  std::set<uint64_t> above;
  bool gone = false;
  // It said GOODBYE, or the store said it left: its connection closing is
  // a leave, not a death. We read that connection to its end (its last
  // replies, GOODBYE, the close) but send nothing new on it.
  bool leaving = false;
  Status gone_why;

  bool SeenBefore(uint64_t seq) {
    if (seq <= floor) return true;
    if (seq == floor + 1 && above.empty()) {  // in order: the usual case
      floor = seq;
      return false;
    }
    if (above.count(seq) != 0) return true;
    above.insert(seq);
    while (!above.empty() && *above.begin() == floor + 1) {
      above.erase(above.begin());
      ++floor;
    }
    return false;
  }

  Status LeftTheJob() const {
    return Status(FERRY_PEER_GONE, "worker '" + record.name + "' left the job");
  }
};

// One place() in flight: the message being assembled and its destinations.
struct PendingPlace {
  uint64_t conn_id = 0;
  std::unique_ptr<InMessage> msg;
  bool body_in_segment0 = false;
};

Engine::Engine(EngineOptions options, EngineSink* sink)
    : options_(std::move(options)), sink_(sink) {}

Engine::~Engine() { Stop(std::chrono::milliseconds(0)); }

Status Engine::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  kick_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || kick_fd_ < 0) {
    return Status(FERRY_INTERNAL, std::string("epoll/eventfd: ") + strerror(errno));
  }
  epoll_event kev{};
  kev.events = EPOLLIN;
  kev.data.fd = kick_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, kick_fd_, &kev);

  std::vector<std::string> names = options_.transports;
  if (std::find(names.begin(), names.end(), kStorePlugin) == names.end()) {
    names.push_back(kStorePlugin);
  }
  for (const auto& name : names) {
    const bool member = std::find(options_.transports.begin(),
                                  options_.transports.end(),
                                  name) != options_.transports.end();
    Status s = StartTransport(name);
    if (!s.ok() && member && options_.skip_unusable && name != kStorePlugin) {
      FERRY_LOG(FERRY_LOG_INFO, kLog, "auto: skipping transport '" + name + "': " +
                                          s.message());
      continue;
    }
    if (!s.ok()) {
      if (member) return s;
      return Status(s.code(), "the rendezvous store needs the tcp plugin: " +
                                  s.message());
    }
    slots_.back()->member = member;
  }
  bool any_member = false;
  for (const auto& s : slots_) any_member |= s->member;
  if (!any_member) {
    return Status(FERRY_NOT_FOUND, "no usable transport among the ones asked for");
  }
  // Received-tensor buffers nobody reused for a while go back to the kernel.
  if (const auto idle = receive_buffers::IdleTimeFromEnvironment(); idle.count() > 0) {
    AddTimer(std::chrono::milliseconds(1000), [idle] { receive_buffers::TrimIdle(idle); });
  }
  return Status::Ok();
}

Status Engine::StartTransport(const std::string& name) {
  auto plugin = loader_.Load(name);
  if (!plugin.ok()) return plugin.status();
  auto opened = Transport::Open(plugin.value(),
                                options_.busy_poll ? FERRY_INIT_BUSY_POLL : 0,
                                name);
  if (!opened.ok()) return opened.status();
  auto slot = std::make_unique<TransportSlot>();
  slot->transport = std::move(opened.value());
  slot->name = name;
  slot->events.resize(kEventBatch);
  for (auto& ev : slot->events) ev.struct_size = FERRY_EVENT_STRUCT_SIZE;
  if (!slot->transport->HasCap(FERRY_CAP_THREAD_SAFE)) {
    slot->call_mu = std::make_unique<std::mutex>();
  }
  const int fd = slot->transport->info().wakeup_fd;
  if (slot->transport->HasCap(FERRY_CAP_WAKEUP_FD) && fd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  } else {
    all_have_wakeup_fd_ = false;
  }
  // Every plugin listens at its default address: tcp on 127.0.0.1 unless
  // FERRY_TCP_LISTEN_HOST says otherwise, shm in its private directory.
  Status s = slot->transport->Listen(options_.listen_address, nullptr,
                                     &slot->listener);
  if (!s.ok()) {
    return Status(s.code(), "transport '" + name + "' cannot listen: " +
                                s.message());
  }
  auto addr = slot->transport->ListenerAddress(slot->listener);
  if (!addr.ok()) return addr.status();
  slot->address = addr.value();
  slots_.push_back(std::move(slot));
  return Status::Ok();
}

void Engine::StartLoop() {
  loop_ = std::thread([this] { LoopMain(); });
}

std::vector<wire::Endpoint> Engine::endpoints() const {
  std::vector<wire::Endpoint> out;
  for (const auto& s : slots_) {
    if (!s->member) continue;
    wire::Endpoint e;
    e.plugin = s->name;
    e.address = s->address;
    e.domain = s->transport->domain();
    e.priority = s->transport->info().priority;
    out.push_back(std::move(e));
  }
  return out;
}

void Engine::SetSelf(uint64_t id, uint64_t incarnation, const std::string& name) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    self_id_ = id;
    self_incarnation_ = incarnation;
    self_name_ = name;
    auto early = std::move(early_hellos_);
    early_hellos_.clear();
    for (auto& [conn, msg] : early) {
      if (Conn* c = FindConn(conn)) OnHandshake(c, *msg, &actions);
    }
  }
  for (auto& a : actions) a();
}

void Engine::AddMember(const wire::MemberRecord& record) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (record.id == self_id_) return;
    auto it = peers_.find(record.id);
    if (it != peers_.end()) {
      Peer* p = it->second.get();
      if (p->record.incarnation > record.incarnation) return;  // stale news
      if (p->record.incarnation == record.incarnation) {
        if (p->record.endpoints.empty()) p->record = record;
        return;
      }
      // A newer incarnation: the old process is gone.
      if (!p->gone) {
        PeerGone(p, Status(FERRY_PEER_GONE, "worker '" + p->record.name +
                               "' restarted (incarnation " +
                               std::to_string(record.incarnation) + ")"),
                 &actions);
      }
      peers_.erase(it);
    }
    auto p = std::make_unique<Peer>();
    p->record = record;
    // Its connection may have arrived before the store's news of it.
    for (auto& [cid, c] : conns_) {
      if (!c->outbound && !c->store && c->state == Conn::State::kChallengeSent &&
          c->peer_id == record.id && c->peer_incarnation == record.incarnation) {
        p->inbound = c.get();
      }
    }
    peers_[record.id] = std::move(p);
  }
  for (auto& a : actions) a();
}

void Engine::RemoveMember(uint64_t id, const Status& why, bool left) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = peers_.find(id);
    if (it == peers_.end() || it->second->gone) return;
    Peer* p = it->second.get();
    if (left) p->leaving = true;
    if (left && p->conn != nullptr && p->conn->state == Conn::State::kReady) {
      // The store's news travels on another connection than the worker's
      // last replies, and can overtake them: a reply it sent before leaving
      // would be lost, its call failed with "left the job". So the
      // connection is read to its end; its close (or, if it never closes,
      // the heartbeat timeout) ends the peer.
      return;
    }
    PeerGone(p, why, &actions);
  }
  for (auto& a : actions) a();
}

std::string Engine::RouteTo(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second->conn == nullptr) return "";
  return it->second->conn->slot->name;
}

StatusOr<wire::Endpoint> Engine::ChooseEndpoint(const wire::MemberRecord& r) const {
  // Our transports in preference order: the first configured one the peer
  // also has, in the same domain, wins; with several configured ("auto"),
  // the highest priority among the shared ones.
  const wire::Endpoint* best = nullptr;
  const TransportSlot* best_slot = nullptr;
  for (const auto& s : slots_) {
    if (!s->member) continue;
    for (const auto& e : r.endpoints) {
      if (e.plugin != s->name || e.domain != s->transport->domain()) continue;
      if (best == nullptr ||
          s->transport->info().priority > best_slot->transport->info().priority) {
        best = &e;
        best_slot = s.get();
      }
    }
  }
  if (best == nullptr) {
    std::string mine, theirs;
    for (const auto& s : slots_) {
      if (s->member) mine += (mine.empty() ? "" : ",") + s->name;
    }
    for (const auto& e : r.endpoints) theirs += (theirs.empty() ? "" : ",") + e.plugin;
    return Status(FERRY_UNAVAILABLE,
                  "no transport reaches worker '" + r.name + "': this worker has [" +
                      mine + "], it has [" + theirs +
                      "] (or the same plugin in another domain, e.g. shm on "
                      "another host); start both with a shared transport");
  }
  return *best;
}

Engine::Conn* Engine::FindConn(uint64_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second.get();
}

Status Engine::SendToMember(uint64_t id, std::unique_ptr<OutMessage> msg) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) {
    return Status(FERRY_NOT_FOUND, "worker id " + std::to_string(id) +
                                       " is not a member of job '" +
                                       options_.job + "'");
  }
  Peer* p = it->second.get();
  if (p->gone) return p->gone_why;
  if (p->leaving) return p->LeftTheJob();
  const uint64_t seq = p->next_seq++;
  if (p->conn != nullptr && p->conn->state == Conn::State::kReady) {
    return SendOnConnLocked(p->conn, std::move(msg), seq);
  }
  p->backlog.emplace_back(seq, std::move(msg));
  // A connection of the peer's that we accepted will carry this: opening a
  // second one would make two that each side may take for the one.
  if (p->outbound == nullptr && p->inbound == nullptr && !p->waiting_for_theirs) {
    Status s = ConnectToPeer(p);
    if (!s.ok()) {
      std::vector<Action> actions;
      PeerGone(p, s, &actions);
      // Sink callbacks must not run under mu_: hand them to a pumper.
      // (PeerGone's actions only report; running them late is harmless.)
      for (auto& a : actions) {
        AddTimerLocked(std::chrono::milliseconds(0), Clock::now(), std::move(a));
      }
      return s;
    }
  }
  return Status::Ok();
}

Status Engine::ConnectToPeer(Peer* p) {
  auto ep = ChooseEndpoint(p->record);
  if (!ep.ok()) return ep.status();
  TransportSlot* slot = nullptr;
  for (auto& s : slots_) {
    if (s->name == ep->plugin) slot = s.get();
  }
  auto c = std::make_unique<Conn>();
  c->id = next_conn_id_++;
  c->slot = slot;
  c->outbound = true;
  c->peer_id = p->record.id;
  c->peer_incarnation = p->record.incarnation;
  c->peer_name = p->record.name;
  c->address = ep->address;
  c->started = Clock::now();
  std::unique_lock<std::mutex> cl;
  if (slot->call_mu) cl = std::unique_lock<std::mutex>(*slot->call_mu);
  Status s = slot->transport->Connect(ep->address, nullptr, &c->handle);
  if (!s.ok()) {
    return Status(s.code(), "cannot connect to worker '" + p->record.name +
                                "' at " + ep->plugin + " " + ep->address +
                                ": " + s.message());
  }
  slot->by_handle[c->handle] = c.get();
  p->outbound = c.get();
  conns_[c->id] = std::move(c);
  return Status::Ok();
}

StatusOr<uint64_t> Engine::ConnectStore(const std::string& address) {
  std::lock_guard<std::mutex> l(mu_);
  TransportSlot* slot = nullptr;
  for (auto& s : slots_) {
    if (s->name == kStorePlugin) slot = s.get();
  }
  auto c = std::make_unique<Conn>();
  c->id = next_conn_id_++;
  c->slot = slot;
  c->outbound = true;
  c->store = true;
  c->role = wire::Role::kStoreClient;
  c->address = address;
  c->started = Clock::now();
  Status s = slot->transport->Connect(address, nullptr, &c->handle);
  if (!s.ok()) {
    return Status(s.code(), "cannot reach the rendezvous store at " + address +
                                ": " + s.message());
  }
  slot->by_handle[c->handle] = c.get();
  const uint64_t id = c->id;
  conns_[id] = std::move(c);
  return id;
}

Status Engine::ListenStore(const std::string& address, std::string* bound) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& s : slots_) {
    if (s->name != kStorePlugin) continue;
    Status st = s->transport->Listen(address, nullptr, &s->store_listener);
    if (!st.ok()) {
      return Status(st.code(), "cannot host the rendezvous store at " + address +
                                   ": " + st.message() +
                                   " (is another job using this port?)");
    }
    auto a = s->transport->ListenerAddress(s->store_listener);
    if (!a.ok()) return a.status();
    *bound = a.value();
    return Status::Ok();
  }
  return Status(FERRY_INTERNAL, "tcp transport not loaded");
}

Status Engine::SendOnConn(uint64_t conn, std::unique_ptr<OutMessage> msg) {
  std::lock_guard<std::mutex> l(mu_);
  Conn* c = FindConn(conn);
  if (c == nullptr || c->state == Conn::State::kClosed) {
    return Status(FERRY_PEER_GONE, "the store connection is closed");
  }
  if (c->state != Conn::State::kReady) {
    c->backlog.push_back(std::move(msg));
    return Status::Ok();
  }
  return SendOnConnLocked(c, std::move(msg), 0);
}

void Engine::CloseConn(uint64_t conn) {
  std::lock_guard<std::mutex> l(mu_);
  if (Conn* c = FindConn(conn)) CloseConnLocked(c);
}

Status Engine::SendOnConnLocked(Conn* c, std::unique_ptr<OutMessage> msg,
                                uint64_t seq) {
  Transport& t = *c->slot->transport;
  const auto& info = t.info();
  wire::Envelope env;
  env.kind = msg->kind;
  env.seq = seq;
  // The transport copies the header during send() (transport.h), so one
  // buffer, reused under mu_, serves every message: no allocation per send.
  std::vector<uint8_t>& header = header_scratch_;
  header.clear();
  msg->body_in_segment0 =
      wire::kEnvelopeSize + msg->body.size() > info.max_header_size;
  if (msg->body_in_segment0) env.flags |= wire::kFlagBodyInSegment0;
  wire::Writer w(&header);
  wire::EncodeEnvelope(env, w);
  if (!msg->body_in_segment0) w.Raw(msg->body.data(), msg->body.size());

  ferry_segment_t segs[64];
  const size_t nseg = msg->tensors.size() + (msg->body_in_segment0 ? 1 : 0);
  uint64_t total = header.size();
  if (nseg > std::min<uint32_t>(info.max_segments, 64)) {
    return Status(FERRY_RESOURCE_EXHAUSTED,
                  "a message carries " + std::to_string(msg->tensors.size()) +
                      " tensors; transport '" + c->slot->name + "' takes at most " +
                      std::to_string(std::min<uint32_t>(info.max_segments, 64) -
                                     (msg->body_in_segment0 ? 1 : 0)) +
                      ": send fewer tensors per call (or concatenate them)");
  }
  size_t i = 0;
  if (msg->body_in_segment0) {
    segs[i] = {};
    segs[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    segs[i].data = msg->body.data();
    segs[i].length = msg->body.size();
    segs[i].device = {FERRY_DEVICE_CPU, 0};
    total += msg->body.size();
    ++i;
  }
  for (const auto& tensor : msg->tensors) {
    segs[i] = {};
    segs[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    segs[i].data = tensor.data;
    segs[i].length = tensor.nbytes;
    segs[i].device = {static_cast<int32_t>(tensor.device.device_type),
                      tensor.device.device_id};
    total += tensor.nbytes;
    ++i;
  }
  if (total > info.max_message_size) {
    return Status(FERRY_RESOURCE_EXHAUSTED,
                  "a message of " + std::to_string(total) +
                      " bytes exceeds transport '" + c->slot->name + "''s limit of " +
                      std::to_string(info.max_message_size) +
                      " bytes: split the payload or raise the plugin's limit");
  }
  ferry_send_args_t args{};
  args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
  args.num_segments = static_cast<uint32_t>(nseg);
  args.header = header.data();
  args.header_len = header.size();
  args.segments = segs;
  args.segment_stride = sizeof(ferry_segment_t);
  OutMessage* raw = msg.release();
  args.user_data = raw;
  std::unique_lock<std::mutex> cl;
  if (c->slot->call_mu) cl = std::unique_lock<std::mutex>(*c->slot->call_mu);
  Status s = t.Send(c->handle, args);
  if (!s.ok()) {
    delete raw;  // never posted: its tensors' deleters run now
    return s;
  }
  in_flight_.Insert(raw);
  c->last_sent = Clock::now();
  return Status::Ok();
}

Status Engine::SendHandshake(Conn* c, wire::Kind kind,
                             const std::function<void(wire::Writer&)>& body) {
  auto msg = std::make_unique<OutMessage>();
  msg->kind = kind;
  wire::Writer w(&msg->body);
  body(w);
  return SendOnConnLocked(c, std::move(msg), 0);
}

void Engine::RejectAndClose(Conn* c, ferry_status_t code, const std::string& why,
                            std::vector<Action>* actions) {
  SendHandshake(c, wire::Kind::kReject, [&](wire::Writer& w) {
    w.I32(code);
    w.Str(why);
  });
  // A connection we opened, or one a peer's traffic already runs on, has
  // callers waiting behind it: fail them now with the reason instead of
  // leaving them to their deadlines.
  ConnFailed(c, Status(code, "refused the connection " +
                                 std::string(c->outbound ? "to " : "from ") + c->address +
                                 ": " + why),
             actions);
}

void Engine::CloseConnLocked(Conn* c) {
  if (c->state == Conn::State::kClosed) return;
  c->state = Conn::State::kClosed;
  c->backlog.clear();
  // A peer never points at a closed connection: FERRY_EV_CLOSED frees it, and
  // a peer whose outbound connection is closed must be free to connect again.
  if (auto it = peers_.find(c->peer_id); it != peers_.end()) {
    Peer* p = it->second.get();
    if (p->conn == c) p->conn = nullptr;
    if (p->outbound == c) p->outbound = nullptr;
    if (p->inbound == c) p->inbound = nullptr;
  }
  std::unique_lock<std::mutex> cl;
  if (c->slot->call_mu) cl = std::unique_lock<std::mutex>(*c->slot->call_mu);
  c->slot->transport->Close(c->handle);
  // The Conn lives on until FERRY_EV_CLOSED: events for it may still come.
}

bool Engine::PumpOnce() {
  if (!progress_mu_.try_lock()) return false;
  // Reuse this thread's action list (and its capacity) from the previous
  // pump. An action may pump again on this thread (a handler waiting for a
  // call): that nested pump finds the spare taken and starts an empty one.
  thread_local std::vector<Action> spare;
  std::vector<Action> actions;
  actions.swap(spare);
  bool any = false;
  for (auto& slot_ptr : slots_) {
    TransportSlot& slot = *slot_ptr;
    uint32_t n = 0;
    {
      std::unique_lock<std::mutex> cl;
      if (slot.call_mu) cl = std::unique_lock<std::mutex>(*slot.call_mu);
      Status s = slot.transport->Progress(slot.events.data(), kEventBatch, &n);
      if (!s.ok()) {
        FERRY_LOG(FERRY_LOG_ERROR, kLog,
                  "transport '" + slot.name + "' progress failed: " + s.ToString());
      }
    }
    if (n == 0) continue;
    any = true;
    std::lock_guard<std::mutex> l(mu_);
    for (uint32_t i = 0; i < n; ++i) ProcessEvent(slot, slot.events[i], &actions);
  }
  const auto now = Clock::now();
  if (now.time_since_epoch().count() >= timers_due_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> l(mu_);
    RunTimers(now, &actions);
  }
  progress_mu_.unlock();
  for (auto& a : actions) a();
  const bool acted = !actions.empty();
  if (acted) NotifyWaiters();
  actions.clear();
  if (actions.capacity() > spare.capacity()) actions.swap(spare);
  return any || acted;
}

void Engine::ProcessEvent(TransportSlot& slot, const ferry_event_t& ev,
                          std::vector<Action>* actions) {
  switch (ev.type) {
    case FERRY_EV_ACCEPTED:
      OnAccepted(slot, ev);
      return;
    case FERRY_EV_SEND_DONE:
      in_flight_.Erase(static_cast<OutMessage*>(ev.user_data));
      delete static_cast<OutMessage*>(ev.user_data);
      return;
    case FERRY_EV_PLACE_DONE: {
      places_in_flight_.erase(ev.user_data);
      std::unique_ptr<PendingPlace> pp(static_cast<PendingPlace*>(ev.user_data));
      Conn* c = FindConn(pp->conn_id);
      if (ev.status != FERRY_OK || c == nullptr ||
          c->state == Conn::State::kClosed) {
        return;  // the connection failed; its CONN_BROKEN tells the rest
      }
      if (pp->body_in_segment0) {
        AlignedBuffer& b = pp->msg->segments.front();
        const auto* p = static_cast<const uint8_t*>(b.data);
        pp->msg->body.assign(p, p + b.size);
        pp->msg->segments.erase(pp->msg->segments.begin());
      }
      OnMessageComplete(c, std::move(pp->msg), actions);
      return;
    }
    default:
      break;
  }
  auto it = slot.by_handle.find(ev.conn);
  if (it == slot.by_handle.end()) return;
  Conn* c = it->second;
  switch (ev.type) {
    case FERRY_EV_CONNECTED:
      OnConnected(c, ev, actions);
      break;
    case FERRY_EV_ARRIVAL:
      // Closed earlier in this same batch: close() released the arrival and
      // its borrowed header and segments with it (transport.h,
      // FERRY_EV_CLOSED). Touch nothing.
      if (c->state != Conn::State::kClosed) OnArrival(c, ev, actions);
      break;
    case FERRY_EV_CONN_BROKEN:
      if (c->state != Conn::State::kClosed) {
        ConnFailed(c, Status(ev.status == FERRY_OK ? FERRY_PEER_GONE : ev.status,
                             ev.message ? ev.message : "connection lost"),
                   actions);
      }
      break;
    case FERRY_EV_CLOSED:
      slot.by_handle.erase(it);
      conns_.erase(c->id);
      break;
    default:
      break;
  }
}

void Engine::OnAccepted(TransportSlot& slot, const ferry_event_t& ev) {
  auto c = std::make_unique<Conn>();
  c->id = next_conn_id_++;
  c->slot = &slot;
  c->handle = ev.conn;
  c->state = Conn::State::kAwaitHello;
  c->started = c->last_heard = Clock::now();
  auto peer = slot.transport->PeerAddress(ev.conn);
  if (peer.ok()) c->address = peer.value();
  slot.by_handle[ev.conn] = c.get();
  ++stats_.connections;
  conns_[c->id] = std::move(c);
}

void Engine::OnConnected(Conn* c, const ferry_event_t& ev,
                         std::vector<Action>* actions) {
  if (c->state == Conn::State::kClosed) return;
  if (ev.status != FERRY_OK) {
    ConnFailed(c, Status(ev.status, ev.message ? ev.message : "connect failed"),
               actions);
    return;
  }
  ++stats_.connections;
  c->state = Conn::State::kHelloSent;
  c->last_heard = Clock::now();
  c->my_nonce = auth::RandomNonce();
  SendHandshake(c, wire::Kind::kHello, [&](wire::Writer& w) {
    w.U8(wire::kWireVersion);
    w.U8(static_cast<uint8_t>(c->role));
    w.Str(options_.job);
    w.U64(c->store ? 0 : self_id_.load());
    w.U64(self_incarnation_);
    w.Str(self_name_);
    w.Raw(c->my_nonce.data(), c->my_nonce.size());
  });
}

void Engine::OnArrival(Conn* c, const ferry_event_t& ev,
                       std::vector<Action>* actions) {
  Transport& t = *c->slot->transport;
  wire::Reader r(ev.header, ev.header_len);
  auto msg = std::make_unique<InMessage>();
  uint8_t version = 0;
  if (!wire::DecodeEnvelope(r, &msg->envelope, &version) ||
      version != wire::kWireVersion) {
    t.Discard(c->handle, ev.msg_id);
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "dropping a connection from " + c->address +
                  ": not a ferry peer of wire version " +
                  std::to_string(wire::kWireVersion) + " (a " +
                  std::to_string(ev.header_len) + "-byte header, version " +
                  std::to_string(version) + ")");
    ConnFailed(c, Status(FERRY_INCOMPATIBLE, "not a ferry wire-v1 peer"), actions);
    return;
  }
  if (c->outbound && c->state == Conn::State::kAuthSent &&
      !IsHandshake(msg->envelope.kind)) {
    // The acceptor sends nothing but READY before it has checked our AUTH,
    // and it proved it holds the secret in its CHALLENGE: anything else from
    // it means READY is on its way. On a transport without
    // FERRY_CAP_ORDERED (chaos) it may arrive after this message.
    MakeReady(c, actions);
    if (c->state != Conn::State::kReady) return;  // closed: close() released it
  }
  const bool body_seg0 = (msg->envelope.flags & wire::kFlagBodyInSegment0) != 0;
  if (body_seg0 && ev.num_segments == 0) {
    t.Discard(c->handle, ev.msg_id);
    ConnFailed(c, Status(FERRY_DATA_LOSS, "malformed message: body segment missing"),
               actions);
    return;
  }
  if (!body_seg0) {
    const auto* p = static_cast<const uint8_t*>(ev.header) + wire::kEnvelopeSize;
    msg->body.assign(p, p + r.remaining());
  }
  // Before authentication nothing but header-only handshake messages is
  // accepted: an unauthenticated peer cannot make us allocate payloads.
  if (c->state != Conn::State::kReady && ev.num_segments != 0) {
    t.Discard(c->handle, ev.msg_id);
    RejectAndClose(c, FERRY_UNAUTHENTICATED, "payload before authentication", actions);
    return;
  }
  bool all_inline = true;
  msg->segments.reserve(ev.num_segments);
  for (uint32_t i = 0; i < ev.num_segments; ++i) {
    const auto* seg = FERRY_ELEMENT_AT(const ferry_arrival_segment_t, ev.segments,
                                       ev.segment_stride, i);
    msg->segments.emplace_back(seg->length);
    if (seg->inline_data != nullptr) {
      if (seg->length) std::memcpy(msg->segments.back().data, seg->inline_data, seg->length);
    } else {
      all_inline = false;
    }
  }
  if (all_inline) {
    t.Discard(c->handle, ev.msg_id);
    if (body_seg0) {
      AlignedBuffer& b = msg->segments.front();
      const auto* p = static_cast<const uint8_t*>(b.data);
      msg->body.assign(p, p + b.size);
      msg->segments.erase(msg->segments.begin());
    }
    OnMessageComplete(c, std::move(msg), actions);
    return;
  }
  std::vector<ferry_place_dest_t> dests(ev.num_segments);
  for (uint32_t i = 0; i < ev.num_segments; ++i) {
    dests[i] = {};
    dests[i].struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
    dests[i].data = msg->segments[i].data;
    dests[i].capacity = msg->segments[i].size;
    dests[i].device = {FERRY_DEVICE_CPU, 0};
  }
  auto pp = std::make_unique<PendingPlace>();
  pp->conn_id = c->id;
  pp->body_in_segment0 = body_seg0;
  pp->msg = std::move(msg);
  ferry_place_args_t args{};
  args.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  args.num_dests = ev.num_segments;
  args.msg_id = ev.msg_id;
  args.dests = dests.data();
  args.dest_stride = sizeof(ferry_place_dest_t);
  args.user_data = pp.get();
  Status s = t.Place(c->handle, args);
  if (!s.ok()) {
    t.Discard(c->handle, ev.msg_id);
    ConnFailed(c, Status(s.code(), "receiving a message failed: " + s.message()),
               actions);
    return;
  }
  places_in_flight_.insert(pp.release());  // owned by PLACE_DONE now
}

void Engine::OnMessageComplete(Conn* c, std::unique_ptr<InMessage> msg,
                               std::vector<Action>* actions) {
  if (c->state == Conn::State::kClosed) return;
  c->last_heard = Clock::now();
  const wire::Kind kind = msg->envelope.kind;
  if (IsHandshake(kind)) {
    if (kind == wire::Kind::kHello && self_id_ == 0 && !c->outbound &&
        msg->body.size() > 1 && msg->body[1] == static_cast<uint8_t>(wire::Role::kMember)) {
      early_hellos_.emplace_back(c->id, std::move(msg));
      return;
    }
    OnHandshake(c, *msg, actions);
    return;
  }
  if (c->state != Conn::State::kReady) {
    FERRY_LOG(FERRY_LOG_WARN, kLog,
              "refused a connection from " + c->address +
                  ": it sent a message before authenticating");
    ++stats_.refused;
    RejectAndClose(c, FERRY_UNAUTHENTICATED, "authenticate first", actions);
    return;
  }
  if (kind == wire::Kind::kHeartbeat) return;
  if (kind == wire::Kind::kGoodbye && !c->store) {
    // The peer is leaving gracefully: what breaks next is not a death.
    auto it = peers_.find(c->peer_id);
    if (it != peers_.end() && it->second->conn == c) it->second->leaving = true;
    return;
  }
  if (c->store || IsStoreKind(kind)) {
    const uint64_t id = c->id;
    auto* raw = msg.release();
    actions->push_back([this, id, raw] {
      sink_->OnStoreMessage(id, std::unique_ptr<InMessage>(raw));
    });
    return;
  }
  auto it = peers_.find(c->peer_id);
  if (it == peers_.end() || it->second->conn != c) return;  // superseded
  Peer* p = it->second.get();
  const PeerKey from{p->record.id, p->record.incarnation};
  if (msg->envelope.seq != 0 && p->SeenBefore(msg->envelope.seq)) {
    if (kind == wire::Kind::kControl) {
      auto* raw = msg.release();
      actions->push_back([this, from, raw] {
        std::unique_ptr<InMessage> m(raw);
        sink_->OnDuplicateControl(from, *m);
      });
    }
    return;
  }
  msg->from = from;
  // [this, raw] fits std::function's in-place storage: no allocation.
  auto* raw = msg.release();
  actions->push_back([this, raw] {
    sink_->OnMessage(raw->from, std::unique_ptr<InMessage>(raw));
  });
}

void Engine::OnHandshake(Conn* c, const InMessage& msg,
                         std::vector<Action>* actions) {
  wire::Reader r(msg.body.data(), msg.body.size());
  const wire::Kind kind = msg.envelope.kind;
  if (kind == wire::Kind::kReject) {
    const int32_t code = r.I32();
    const std::string why = r.Str(4096);
    if (!c->outbound) {
      // The connector refused our proof: our secrets differ.
      ++stats_.refused;
      FERRY_LOG(FERRY_LOG_WARN, kLog,
                "refused a connection from " + c->address + " claiming to be '" +
                    c->peer_name + "': " + why +
                    " (wrong or missing job secret; no handler ran)");
      ConnFailed(c, Status(code == 0 ? FERRY_UNAUTHENTICATED : code,
                           c->address + " refused the connection: " + why),
                 actions);
      return;
    }
    if (code == FERRY_ALREADY_EXISTS && !c->store) {
      // We lost a connect race: the peer's own connection will arrive.
      auto it = peers_.find(c->peer_id);
      if (it != peers_.end() && it->second->outbound == c) {
        it->second->waiting_for_theirs = true;
      }
      CloseConnLocked(c);  // detaches it from the peer
      return;
    }
    ConnFailed(c, Status(code == 0 ? FERRY_UNAVAILABLE : code,
                         (c->store ? "the rendezvous store at " : "worker at ") +
                             c->address + " refused the connection: " + why),
               actions);
    return;
  }
  if (kind == wire::Kind::kHello && c->state == Conn::State::kAwaitHello) {
    const uint8_t version = r.U8();
    const uint8_t role = r.U8();
    const std::string job = r.Str(4096);
    c->peer_id = r.U64();
    c->peer_incarnation = r.U64();
    c->peer_name = r.Str(4096);
    r.Raw(c->their_nonce.data(), c->their_nonce.size());
    if (!r.ok() || (role != 1 && role != 2)) {
      ++stats_.refused;
      RejectAndClose(c, FERRY_INVALID_ARGUMENT, "malformed HELLO", actions);
      return;
    }
    if (version != wire::kWireVersion) {
      ++stats_.refused;
      RejectAndClose(c, FERRY_INCOMPATIBLE,
                     "wire version " + std::to_string(version) +
                         " is not supported (this worker speaks " +
                         std::to_string(wire::kWireVersion) + ")", actions);
      return;
    }
    if (job != options_.job) {
      ++stats_.refused;
      FERRY_LOG(FERRY_LOG_WARN, kLog,
                "refused a connection from " + c->address + ": it belongs to job '" +
                    job + "', this is job '" + options_.job + "'");
      RejectAndClose(c, FERRY_PERMISSION_DENIED,
                     "this is job '" + options_.job + "', not '" + job + "'", actions);
      return;
    }
    c->role = static_cast<wire::Role>(role);
    c->store = c->role == wire::Role::kStoreClient;
    if (!c->store) {
      auto it = peers_.find(c->peer_id);
      if (it != peers_.end()) {
        Peer* p = it->second.get();
        if (p->record.incarnation > c->peer_incarnation) {
          RejectAndClose(c, FERRY_FAILED_PRECONDITION,
                         "incarnation " + std::to_string(c->peer_incarnation) +
                             " of this worker has been replaced", actions);
          return;
        }
        // Connect race: the lower id's connection wins, whether still in
        // its handshake or already authenticated here. (Its acceptor may
        // already have sent calls on it, and takes it for the one.)
        const bool mine = p->outbound != nullptr ||
                          (p->conn != nullptr && p->conn->outbound);
        if (mine && p->record.incarnation == c->peer_incarnation &&
            self_id_ < c->peer_id) {
          RejectAndClose(c, FERRY_ALREADY_EXISTS, "connection race: mine wins", actions);
          return;
        }
        if (p->record.incarnation == c->peer_incarnation) p->inbound = c;
      }
    }
    c->my_nonce = auth::RandomNonce();
    const auto proof = auth::AcceptorProof(options_.secret, options_.job,
                                           c->their_nonce, c->my_nonce, self_id_);
    c->state = Conn::State::kChallengeSent;
    SendHandshake(c, wire::Kind::kChallenge, [&](wire::Writer& w) {
      w.U64(self_id_);
      w.U64(self_incarnation_);
      w.Raw(c->my_nonce.data(), c->my_nonce.size());
      w.Raw(proof.data(), proof.size());
    });
    return;
  }
  if (kind == wire::Kind::kChallenge && c->state == Conn::State::kHelloSent) {
    const uint64_t id = r.U64();
    const uint64_t incarnation = r.U64();
    r.Raw(c->their_nonce.data(), c->their_nonce.size());
    auth::Mac proof{};
    r.Raw(proof.data(), proof.size());
    const auto expect = auth::AcceptorProof(options_.secret, options_.job,
                                            c->my_nonce, c->their_nonce, id);
    if (!r.ok() || !auth::Equal(proof, expect)) {
      ++stats_.refused;
      FERRY_LOG(FERRY_LOG_WARN, kLog,
                "closed the connection to " + c->address +
                    ": it could not prove it holds this job's secret");
      // Tell the acceptor too, so that the refusal is logged on both sides.
      SendHandshake(c, wire::Kind::kReject, [](wire::Writer& w) {
        w.I32(FERRY_UNAUTHENTICATED);
        w.Str("the job secrets differ");
      });
      ConnFailed(c, Status(FERRY_UNAUTHENTICATED,
                           c->address + " does not hold this job's secret (set the "
                                        "same FERRY_SECRET or FERRY_SECRET_FILE on every worker)"),
                 actions);
      return;
    }
    if (!c->store && (id != c->peer_id || incarnation != c->peer_incarnation)) {
      ConnFailed(c, Status(FERRY_PEER_GONE,
                           "the address of worker '" + c->peer_name +
                               "' now belongs to another worker: it is gone"),
                 actions);
      return;
    }
    const auto mine = auth::ConnectorProof(options_.secret, options_.job,
                                           c->their_nonce, c->my_nonce,
                                           c->store ? 0 : self_id_.load());
    c->state = Conn::State::kAuthSent;
    SendHandshake(c, wire::Kind::kAuth, [&](wire::Writer& w) {
      w.Raw(mine.data(), mine.size());
    });
    return;
  }
  if (kind == wire::Kind::kAuth && c->state == Conn::State::kChallengeSent) {
    auth::Mac proof{};
    r.Raw(proof.data(), proof.size());
    const auto expect = auth::ConnectorProof(options_.secret, options_.job,
                                             c->my_nonce, c->their_nonce,
                                             c->peer_id);
    if (!r.ok() || !auth::Equal(proof, expect)) {
      ++stats_.refused;
      FERRY_LOG(FERRY_LOG_WARN, kLog,
                "refused a connection from " + c->address + " claiming to be '" +
                    c->peer_name + "': wrong or missing job secret");
      RejectAndClose(c, FERRY_UNAUTHENTICATED,
                     "authentication failed: wrong or missing job secret (set "
                     "FERRY_SECRET or FERRY_SECRET_FILE like the other workers)", actions);
      return;
    }
    SendHandshake(c, wire::Kind::kReady, [](wire::Writer&) {});
    MakeReady(c, actions);
    return;
  }
  if (kind == wire::Kind::kReady && c->state == Conn::State::kAuthSent) {
    MakeReady(c, actions);
    return;
  }
  // A transport may deliver a message twice: a handshake message for a step
  // this connection has already passed is a duplicate, not an attack.
  const bool duplicate =
      (kind == wire::Kind::kHello && (c->state == Conn::State::kChallengeSent ||
                                      c->state == Conn::State::kReady)) ||
      (kind == wire::Kind::kChallenge && (c->state == Conn::State::kAuthSent ||
                                          c->state == Conn::State::kReady)) ||
      (kind == wire::Kind::kAuth && c->state == Conn::State::kReady) ||
      (kind == wire::Kind::kReady && c->state == Conn::State::kReady);
  if (duplicate) return;
  ++stats_.refused;
  RejectAndClose(c, FERRY_FAILED_PRECONDITION, "handshake message out of order", actions);
}

void Engine::MakeReady(Conn* c, std::vector<Action>* actions) {
  c->state = Conn::State::kReady;
  c->last_heard = c->last_sent = Clock::now();
  if (c->store) {
    while (!c->backlog.empty()) {
      auto m = std::move(c->backlog.front());
      c->backlog.pop_front();
      SendOnConnLocked(c, std::move(m), 0);
    }
    return;
  }
  auto it = peers_.find(c->peer_id);
  if (it == peers_.end()) {
    auto p = std::make_unique<Peer>();
    p->record.id = c->peer_id;
    p->record.incarnation = c->peer_incarnation;
    p->record.name = c->peer_name;
    it = peers_.emplace(c->peer_id, std::move(p)).first;
  } else if (it->second->record.incarnation < c->peer_incarnation) {
    // A newer incarnation introduced itself before the store told us.
    Peer* old = it->second.get();
    if (!old->gone) {
      PeerGone(old, Status(FERRY_PEER_GONE, "worker '" + old->record.name +
                                                "' restarted"),
               actions);
    }
    auto p = std::make_unique<Peer>();
    p->record.id = c->peer_id;
    p->record.incarnation = c->peer_incarnation;
    p->record.name = c->peer_name;
    it->second = std::move(p);
  }
  Peer* p = it->second.get();
  if (p->gone) {
    CloseConnLocked(c);
    return;
  }
  if (p->conn != nullptr && p->conn != c) CloseConnLocked(p->conn);
  if (p->outbound != nullptr && p->outbound != c) CloseConnLocked(p->outbound);
  if (p->inbound != nullptr && p->inbound != c) CloseConnLocked(p->inbound);
  p->outbound = nullptr;
  p->inbound = nullptr;
  p->waiting_for_theirs = false;
  p->conn = c;
  while (!p->backlog.empty()) {
    auto [seq, m] = std::move(p->backlog.front());
    p->backlog.pop_front();
    Status s = SendOnConnLocked(c, std::move(m), seq);
    if (!s.ok()) {
      FERRY_LOG(FERRY_LOG_ERROR, kLog, "sending to '" + p->record.name +
                                           "' failed: " + s.ToString());
    }
  }
}

void Engine::ConnFailed(Conn* c, const Status& why, std::vector<Action>* actions) {
  if (c->store) {
    // Only a connection that was ours or had authenticated concerns the
    // store's users: a stranger refused during its handshake is not news
    // (and must not read as the loss of the store this worker is joining).
    const bool known = c->outbound || c->state == Conn::State::kReady;
    const uint64_t id = c->id;
    CloseConnLocked(c);
    if (known) actions->push_back([this, id, why] { sink_->OnStoreConnGone(id, why); });
    return;
  }
  auto it = peers_.find(c->peer_id);
  Peer* p = it == peers_.end() ? nullptr : it->second.get();
  const bool was_conn = p != nullptr && p->conn == c;
  const bool was_outbound = p != nullptr && p->outbound == c;
  const bool was_inbound = p != nullptr && p->inbound == c;
  CloseConnLocked(c);  // detaches c from p
  if (was_inbound && !p->gone && p->conn == nullptr && p->outbound == nullptr &&
      !p->backlog.empty()) {
    // Calls were waiting for the connection it had opened: open ours.
    Status s = ConnectToPeer(p);
    if (!s.ok()) PeerGone(p, s, actions);
    return;
  }
  if (was_outbound && p->conn == nullptr && !p->waiting_for_theirs) {
    PeerGone(p, Status(why.code() == FERRY_UNAVAILABLE ? FERRY_PEER_GONE : why.code(),
                       "cannot reach worker '" + p->record.name + "': " + why.message()),
             actions);
    return;
  }
  if (was_conn) {
    PeerGone(p, Status(why.code() == FERRY_OK ? FERRY_PEER_GONE : why.code(),
                       "worker '" + p->record.name + "' is gone: " + why.message()),
             actions);
  }
}

void Engine::PeerGone(Peer* p, const Status& why, std::vector<Action>* actions) {
  if (p->gone) return;
  p->gone = true;
  p->gone_why = why.code() == FERRY_DEADLINE_EXCEEDED
                    ? Status(FERRY_PEER_GONE, why.message())
                    : why;
  p->backlog.clear();
  if (p->conn) CloseConnLocked(p->conn);
  if (p->outbound) CloseConnLocked(p->outbound);
  if (p->inbound) CloseConnLocked(p->inbound);
  FERRY_LOG(FERRY_LOG_INFO, kLog, p->gone_why.message());
  const PeerKey key{p->record.id, p->record.incarnation};
  if (p->leaving) p->gone_why = p->LeftTheJob();
  const Status s = p->gone_why;
  const bool left = p->leaving;
  actions->push_back([this, key, s, left] { sink_->OnPeerGone(key, s, left); });
}

void Engine::AddTimer(std::chrono::milliseconds period, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  AddTimerLocked(period, Clock::now() + period, std::move(fn));
}

void Engine::AddTimerLocked(std::chrono::milliseconds period, Clock::time_point next,
                            std::function<void()> fn) {
  timers_.push_back({period, next, std::move(fn)});
  const Clock::rep t = next.time_since_epoch().count();
  if (t < timers_due_.load(std::memory_order_relaxed)) {
    timers_due_.store(t, std::memory_order_relaxed);
  }
}

void Engine::RunTimers(Clock::time_point now, std::vector<Action>* actions) {
  for (size_t i = 0; i < timers_.size();) {
    Timer& t = timers_[i];
    if (now < t.next) {
      ++i;
      continue;
    }
    if (t.period.count() == 0) {  // one-shot (deferred action)
      actions->push_back(std::move(t.fn));
      timers_.erase(timers_.begin() + static_cast<long>(i));
      continue;
    }
    t.next = now + t.period;
    actions->push_back(t.fn);
    ++i;
  }
  if (now >= next_heartbeat_check_) {
    next_heartbeat_check_ = now + options_.peer_timeout / 8;
    HeartbeatTick(now, actions);
  }
  Clock::time_point due = next_heartbeat_check_;
  for (const Timer& t : timers_) due = std::min(due, t.next);
  timers_due_.store(due.time_since_epoch().count(), std::memory_order_relaxed);
}

void Engine::HeartbeatTick(Clock::time_point now, std::vector<Action>* actions) {
  const auto interval = options_.peer_timeout / 4;
  std::vector<Conn*> silent;
  for (auto& [id, cp] : conns_) {
    Conn* c = cp.get();
    if (c->state == Conn::State::kClosed) continue;
    if (c->state != Conn::State::kReady) {
      if (now - c->started > options_.peer_timeout) silent.push_back(c);
      continue;
    }
    if (now - c->last_heard > options_.peer_timeout) {
      silent.push_back(c);
      continue;
    }
    if (now - c->last_sent >= interval) {
      auto hb = std::make_unique<OutMessage>();
      hb->kind = wire::Kind::kHeartbeat;
      SendOnConnLocked(c, std::move(hb), 0);
    }
  }
  for (Conn* c : silent) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        options_.peer_timeout).count();
    ConnFailed(c, Status(FERRY_PEER_GONE,
                         c->state == Conn::State::kReady
                             ? "no message or heartbeat for " + std::to_string(ms) +
                                   " ms (the process is frozen, overloaded, or the "
                                   "network is down)"
                             : "the connection handshake did not finish within " +
                                   std::to_string(ms) + " ms"),
               actions);
  }
}

bool Engine::WaitUntil(const std::function<bool()>& done, Clock::time_point deadline) {
  foreground_waiters_.fetch_add(1);
  auto idle_since = Clock::now();
  bool result = false;
  while (true) {
    if (done()) {
      result = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline || stopping_.load()) break;
    if (PumpOnce()) {
      idle_since = Clock::now();
      continue;
    }
    if (options_.busy_poll) {
      CpuRelax();
      continue;
    }
    if (now - idle_since < options_.spin) {
      CpuRelax();
      continue;
    }
    // Nothing to do for a while: sleep until a transport has work, a kick,
    // or at most 5 ms (timers, and replies another thread processed).
    SleepOnWakeupFds(std::min(deadline, now + std::chrono::milliseconds(5)));
    idle_since = Clock::now();
  }
  if (foreground_waiters_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> l(wait_mu_);
    wait_cv_.notify_all();
  }
  return result;
}

void Engine::SleepOnWakeupFds(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now >= deadline) return;
  int timeout_ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count());
  if (timeout_ms < 1) timeout_ms = 1;
  if (!all_have_wakeup_fd_) timeout_ms = 1;  // a transport must be polled
  epoll_event evs[8];
  const int n = epoll_wait(epoll_fd_, evs, 8, timeout_ms);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.fd == kick_fd_) {
      uint64_t v;
      (void)!read(kick_fd_, &v, sizeof v);
    }
  }
}

void Engine::Kick() {
  if (kick_fd_ < 0) return;
  uint64_t one = 1;
  (void)!write(kick_fd_, &one, sizeof one);
}

void Engine::NotifyWaiters() {
  // A thread sleeping in epoll_wait is woken by the kick; one yielding to
  // the pumping thread re-checks within its spin.
  if (foreground_waiters_.load() > 0 && !options_.busy_poll) Kick();
}

void Engine::LoopMain() {
  auto idle_since = Clock::now();
  uint32_t idle_pumps = 0;
  while (!stopping_.load()) {
    if (foreground_waiters_.load() > 0) {
      // A caller is driving progress (and serving requests) on its own
      // thread; stay out of its way so that it gets its reply first-hand.
      std::unique_lock<std::mutex> l(wait_mu_);
      wait_cv_.wait_for(l, std::chrono::milliseconds(20), [&] {
        return foreground_waiters_.load() == 0 || stopping_.load();
      });
      continue;
    }
    if (PumpOnce()) {
      idle_since = Clock::now();
      continue;
    }
    const auto now = Clock::now();
    if (options_.busy_poll || now - idle_since < options_.spin) {
      // Yield, not only pause: an application thread on this CPU (about to
      // call, or to wait and so take over progress, or a handler we just
      // handed to the executor) must get to run within microseconds, not at
      // the end of our time slice. But only every 8th idle pump: a
      // sched_yield costs about as much as a pump here (~0.3 us on this
      // project's VM), so yielding after each one doubled the time to
      // notice an arriving message.
      if ((++idle_pumps & 7) == 0) {
        std::this_thread::yield();
      } else {
        CpuRelax();
      }
      continue;
    }
    SleepOnWakeupFds(now + std::chrono::milliseconds(20));
    idle_since = Clock::now();
  }
}

void Engine::Stop(std::chrono::milliseconds grace) {
  if (stopping_.exchange(true)) return;
  Kick();
  if (loop_.joinable()) loop_.join();
  const auto deadline = Clock::now() + grace;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, c] : conns_) {
      if (c->state != Conn::State::kReady || c->store) continue;
      auto bye = std::make_unique<OutMessage>();
      bye->kind = wire::Kind::kGoodbye;
      SendOnConnLocked(c.get(), std::move(bye), 0);
    }
  }
  // Let what was sent last (a LEAVE, replies, deletes) leave first.
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (in_flight_.empty()) break;
    }
    if (!PumpOnce()) SleepOnWakeupFds(std::min(deadline, Clock::now() +
                                                std::chrono::milliseconds(2)));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, c] : conns_) CloseConnLocked(c.get());
  }
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (conns_.empty()) break;
    }
    if (!PumpOnce()) SleepOnWakeupFds(std::min(deadline, Clock::now() +
                                                std::chrono::milliseconds(2)));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& s : slots_) {
      if (s->listener) s->transport->CloseListener(s->listener);
      if (s->store_listener) s->transport->CloseListener(s->store_listener);
      s->listener = s->store_listener = nullptr;
    }
    // fini() completes nothing: anything still in flight is abandoned with
    // the context; conns and peers go with it.
    for (auto& [id, p] : peers_) p->backlog.clear();
    conns_.clear();
    timers_.clear();
  }
  slots_.clear();  // fini()
  in_flight_.DeleteAll();
  for (void* p : places_in_flight_) delete static_cast<PendingPlace*>(p);
  places_in_flight_.clear();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (kick_fd_ >= 0) close(kick_fd_);
  epoll_fd_ = kick_fd_ = -1;
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace ferry
