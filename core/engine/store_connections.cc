// The rendezvous store's connections (engine.h), either side: a worker's
// connection to the store, and, on the worker that hosts it, the store's
// listener and its clients' connections. They run the same authenticated
// handshake as members' connections but carry only the store protocol
// (membership/), always over tcp: the store's address is host:port, as
// torch's MASTER_ADDR/PORT is.
#include "engine/connection.h"
#include "engine/engine.h"

namespace ferry {

StatusOr<uint64_t> Engine::ConnectStore(const std::string& address) {
  std::lock_guard<std::mutex> l(mu_);
  TransportSlot* slot = SlotNamed(kStorePlugin);
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
    return Status(s.code(),
                  "cannot reach the rendezvous store at " + address + ": " + s.message());
  }
  slot->by_handle[c->handle] = c.get();
  const uint64_t id = c->id;
  conns_[id] = std::move(c);
  return id;
}

Status Engine::ListenStore(const std::string& address, std::string* bound) {
  std::lock_guard<std::mutex> l(mu_);
  TransportSlot* s = SlotNamed(kStorePlugin);
  if (s == nullptr) return Status(FERRY_INTERNAL, "tcp transport not loaded");
  Status st = s->transport->Listen(address, nullptr, &s->store_listener);
  if (!st.ok()) {
    return Status(st.code(), "cannot host the rendezvous store at " + address + ": " +
                                 st.message() + " (is another job using this port?)");
  }
  auto a = s->transport->ListenerAddress(s->store_listener);
  if (!a.ok()) return a.status();
  *bound = a.value();
  return Status::Ok();
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

}  // namespace ferry
