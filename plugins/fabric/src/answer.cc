// The host's answers to an arrival: discard() drops one message (large
// segments are never read, the sender is told so its SEND_DONE fires),
// place() checks every destination before accepting anything, then starts
// the data path the sender chose (RMA reads or a stream) or completes at
// once for an all-inline message. Either way the arrival's receive buffer
// goes back and the connection's next arrival may be delivered.
#include "context.h"

namespace ferry_fabric {

Status Context::CheckAnswer(Conn* c, uint64_t msg_id, const char* call) const {
  if (c->close_called) {
    return Error(FERRY_FAILED_PRECONDITION,
                 "fabric: %s() on a connection the host has closed", call);
  }
  if (c->held == nullptr || c->held->msg_id != msg_id) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: %s(msg_id %llu): no arrival with that id is waiting "
                 "for an answer on this connection",
                 call, static_cast<unsigned long long>(msg_id));
  }
  return Status();
}

void Context::TellSenderDropped(Conn* c, const RxMsg* m) {
  if (c->state != Conn::State::kOpen || c->peer_closed) return;
  if (m->has_rma) {
    wire::Fin f{};
    f.head = wire::MakeHead(wire::kFin, c->remote_id);
    f.op_id = m->sender_op;
    f.status = FERRY_OK;
    SendControl(c->peer, c->id, &f, sizeof f);
  } else if (m->has_stream) {
    SendCts(c, m->sender_op, 0, 0);
  }
}

ferry_status_t Context::Discard(Conn* c, uint64_t msg_id, Status* error) {
  // Every answered eager message comes here, on the latency path (the
  // host's reply follows): the usual case is tested inline and each step
  // runs only when it has something to do.
  RxMsg* m = c->held;
  if (c->close_called || m == nullptr || m->msg_id != msg_id) {
    return Report(error, CheckAnswer(c, msg_id, "discard"));
  }
  c->held = nullptr;
  // Only this message is dropped: large segments are never read, and the
  // sender is told so its SEND_DONE fires.
  if (m->has_rma || m->has_stream) TellSenderDropped(c, m);
  ReleaseRxMsg(m);
  if (!c->ready.empty() || c->peer_closed) TryDeliver(c);
  return FERRY_OK;
}

Status Context::Place(Conn* c, const ferry_place_args_t& a) {
  Status st = CheckAnswer(c, a.msg_id, "place");
  if (!st.ok()) return st;
  RxMsg* m = c->held;
  const size_t n = m->segs.size();
  if (a.num_dests != n) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: place() gives %u destinations for an arrival of %zu "
                 "segments",
                 a.num_dests, n);
  }
  if (n > 0 && (a.dests == nullptr ||
                a.dest_stride < FERRY_STRUCT_SIZE(ferry_place_dest_t, capacity))) {
    return Error(FERRY_INVALID_ARGUMENT,
                 "fabric: place() needs a destination array with dest_stride >= %zu",
                 FERRY_STRUCT_SIZE(ferry_place_dest_t, capacity));
  }
  bool moves_bytes = false;
  for (size_t i = 0; i < n; ++i) {
    if (m->bulk[i].mode == wire::kInline) continue;  // the host copies those
    const auto* d = FERRY_ELEMENT_AT(const ferry_place_dest_t, a.dests, a.dest_stride, i);
    if (d->data == nullptr) continue;  // dropped
    if (d->capacity < m->segs[i].length) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "fabric: place() destination %zu holds %llu bytes; the "
                   "segment has %llu",
                   i, static_cast<unsigned long long>(d->capacity),
                   static_cast<unsigned long long>(m->segs[i].length));
    }
    if (FERRY_FIELD_PRESENT(d, ferry_place_dest_t, device) && !IsHostMemory(d->device) &&
        !(CudaMemory() && m->bulk[i].mode == wire::kRma)) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "fabric: place() destination %zu is device memory (type "
                   "%d), which provider %s cannot write here (needs FI_HMEM and "
                   "a libfabric that registers CUDA memory: see ferry info)",
                   i, d->device.type, provider_.c_str());
    }
    if (FERRY_FIELD_PRESENT(d, ferry_place_dest_t, mr) && d->mr != nullptr &&
        reinterpret_cast<const HostMr*>(d->mr)->magic != HostMr::kMagic) {
      return Error(FERRY_INVALID_ARGUMENT,
                   "fabric: place() destination %zu carries a registration "
                   "handle that is not one of this plugin's",
                   i);
    }
    moves_bytes = true;
  }

  // Accepted: the arrival is answered, its buffer goes back below.
  c->held = nullptr;
  if (!m->has_rma && !m->has_stream) {
    Emit(FERRY_EV_PLACE_DONE, c, a.user_data);
  } else if (c->state != Conn::State::kOpen || c->peer_closed) {
    if (moves_bytes) {
      EmitError(FERRY_EV_PLACE_DONE, c, a.user_data, FERRY_PEER_GONE,
                "fabric: the sender closed the connection before this "
                "message's large segments were read");
    } else {
      Emit(FERRY_EV_PLACE_DONE, c, a.user_data);
    }
  } else {
    Placement* p = NewPlacement(c, a.user_data, m->sender_op);
    c->placements.push_back(p);
    if (m->has_rma) {
      StartReads(c, m, a, p);
    } else {
      StartStream(c, m, a, p);
    }
  }
  ReleaseRxMsg(m);
  TryDeliver(c);
  return Status();
}

}  // namespace ferry_fabric
