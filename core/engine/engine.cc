// ferry::Engine (engine.h): start, stop, the pump and the timers. The other
// concerns of the class live beside it (engine.h lists the files).
#include "engine/engine.h"

#include "common/log.h"
#include "engine/connection.h"
#include "engine/peer.h"
#include "engine/receive_buffers.h"

#include <algorithm>

namespace ferry {
namespace {

constexpr const char* kLog = "engine";
constexpr uint32_t kEventBatch = 64;

}  // namespace

Engine::Engine(EngineOptions options, EngineSink* sink)
    : options_(std::move(options)),
      sink_(sink),
      driver_(this, options_.busy_poll, options_.spin) {}

Engine::~Engine() {
  Stop(std::chrono::milliseconds(0));
}

Status Engine::Start() {
  if (Status s = driver_.Open(); !s.ok()) return s;
  std::vector<std::string> names = options_.transports;
  if (std::find(names.begin(), names.end(), kStorePlugin) == names.end()) {
    names.push_back(kStorePlugin);
  }
  for (const auto& name : names) {
    const bool member = std::find(options_.transports.begin(), options_.transports.end(),
                                  name) != options_.transports.end();
    Status s = StartTransport(name);
    if (!s.ok() && member && options_.skip_unusable && name != kStorePlugin) {
      FERRY_LOG(FERRY_LOG_INFO, kLog,
                "auto: skipping transport '" + name + "': " + s.message());
      continue;
    }
    if (!s.ok()) {
      if (member) return s;
      return Status(s.code(),
                    "the rendezvous store needs the tcp plugin: " + s.message());
    }
    slots_.back()->member = member;
  }
  bool any_member = false;
  for (const auto& s : slots_) any_member |= s->member;
  if (!any_member) {
    return Status(FERRY_NOT_FOUND, "no usable transport among the ones asked for");
  }
  // Device memory services: the first member transport that moves CUDA
  // memory and offers them (cuda_ipc), and the application's allocator.
  std::shared_ptr<Transport> device;
  for (const auto& s : slots_) {
    if (s->member && s->transport->has_device_memory() &&
        (s->transport->info().memory_kinds & FERRY_MEM_CUDA) != 0) {
      device = s->transport;
      break;
    }
  }
  if (device || options_.device_allocator) {
    device_memory_ = std::make_shared<DeviceMemory>(
        device, options_.device_allocator ? &*options_.device_allocator : nullptr);
    FERRY_LOG(
        FERRY_LOG_INFO, kLog,
        std::string("device tensors: ") +
            (device ? "transport '" + device->name() + "' moves and copies CUDA memory"
                    : "no transport moves CUDA memory") +
            "; received ones are allocated by " +
            (options_.device_allocator ? "the application's allocator"
                                       : "'" + device->name() + "'"));
  }
  // Received-tensor buffers nobody reused for a while go back to the kernel.
  if (const auto idle = receive_buffers::IdleTimeFromEnvironment(); idle.count() > 0) {
    AddTimer(std::chrono::milliseconds(1000),
             [idle] { receive_buffers::TrimIdle(idle); });
  }
  return Status::Ok();
}

Status Engine::StartTransport(const std::string& name) {
  auto plugin = loader_.Load(name);
  if (!plugin.ok()) return plugin.status();
  auto opened = Transport::Open(plugin.value(),
                                options_.busy_poll ? FERRY_INIT_BUSY_POLL : 0, name);
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
    driver_.WatchWakeupFd(fd);
  } else {
    driver_.PollEveryMillisecond();
  }
  // Every plugin listens at its default address: tcp on 127.0.0.1 unless
  // FERRY_TCP_LISTEN_HOST says otherwise, shm in its private directory.
  Status s = slot->transport->Listen(options_.listen_address, nullptr, &slot->listener);
  if (!s.ok()) {
    return Status(s.code(), "transport '" + name + "' cannot listen: " + s.message());
  }
  auto addr = slot->transport->ListenerAddress(slot->listener);
  if (!addr.ok()) return addr.status();
  slot->address = addr.value();
  slots_.push_back(std::move(slot));
  return Status::Ok();
}

void Engine::StartLoop() {
  driver_.StartLoop();
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

Conn* Engine::FindConn(uint64_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second.get();
}

TransportSlot* Engine::SlotNamed(const std::string& name) {
  for (auto& s : slots_) {
    if (s->name == name) return s.get();
  }
  return nullptr;
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
      auto calls = slot.LockCalls();
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
  if (timers_.MaybeDue(now)) {
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

void Engine::AddTimer(std::chrono::milliseconds period, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  timers_.Add(period, Clock::now() + period, std::move(fn));
}

void Engine::RunTimers(Clock::time_point now, std::vector<Action>* actions) {
  timers_.CollectDue(now, actions);
  if (now >= next_heartbeat_check_) {
    next_heartbeat_check_ = now + HeartbeatCheckInterval();
    HeartbeatTick(now, actions);
  }
  timers_.SetDueHint(next_heartbeat_check_);
}

void Engine::Stop(std::chrono::milliseconds grace) {
  if (!driver_.StopLoop()) return;
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
  auto pump_until = [&](const std::function<bool()>& done) {
    while (Clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (done()) break;
      }
      if (!PumpOnce()) {
        driver_.SleepOnWakeupFds(
            std::min(deadline, Clock::now() + std::chrono::milliseconds(2)));
      }
    }
  };
  pump_until([&] { return in_flight_.empty(); });
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, c] : conns_) CloseConnLocked(c.get());
  }
  pump_until([&] { return conns_.empty(); });
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& s : slots_) {
      if (s->listener) s->transport->CloseListener(s->listener);
      if (s->store_listener) s->transport->CloseListener(s->store_listener);
      s->listener = s->store_listener = nullptr;
    }
    // fini() completes nothing: anything still in flight is abandoned with
    // the context; conns and peers go with it.
    for (auto& [id, p] : peers_) {
      p->backlog.clear();
      p->dev_backlog.clear();
    }
    conns_.clear();
    timers_.Clear();
  }
  slots_.clear();  // fini()
  in_flight_.DeleteAll();
  for (void* p : places_in_flight_) delete static_cast<PendingPlace*>(p);
  places_in_flight_.clear();
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

}  // namespace ferry
