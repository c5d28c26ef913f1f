// Large segments over RMA reads (the rendezvous path), used when both sides
// have FI_RMA:
//
//   sender                                   receiver
//   send(): register each large segment      (pre-posted receive buffer)
//     (host handle, or per operation),
//     MSG{seq, op, (addr, key, len)...} ---> ARRIVAL (header, inline bytes,
//                                              sizes of the large segments)
//                                            place(dest...): fi_read straight
//                                              from the sender's memory into
//                                              each placed buffer (registered
//                                              when FI_MR_LOCAL), in chunks of
//                                              rma_chunk_size
//                                            reads complete: PLACE_DONE
//   SEND_DONE, registrations released <--- FIN{op, status}
//
// discard(), or a NULL destination for every large segment, reads nothing
// and still sends the FIN. The sender's segments stay registered and
// readable until the FIN (or, when the connection closes, until the peer
// says it has stopped reading: DISCONNECT / DISCONNECT_ACK).
#include "context.h"

#include "fi_error.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>

namespace ferry_fabric {

Status Context::ExposeSegments(SendOp* op) {
  op->remote.clear();
  op->regs.clear();
  for (SegRef& s : op->segs) {
    if (s.mode != wire::kRma) continue;
    if (s.mr != nullptr && s.mr->Covers(s.data, s.length) &&
        (s.mr->access & FI_REMOTE_READ) != 0) {
      // The host registered this memory once (its buffer pools): no
      // registration on the data path.
      op->remote.push_back(
          wire::RemoteEntry{registrar_->RemoteAddr(s.data, s.mr->base), s.mr->key});
      continue;
    }
    fid_mr* mr = nullptr;
    Status st =
        registrar_->Register(s.data, s.length, s.device, FI_REMOTE_READ | FI_SEND, &mr);
    if (!st.ok()) {
      op->regs.clear();
      op->remote.clear();
      return st;
    }
    op->regs.emplace_back(registrar_.get(), mr);
    op->remote.push_back(
        wire::RemoteEntry{registrar_->RemoteAddr(s.data, s.data), fi_mr_key(mr)});
  }
  return Status();
}

void Context::OnFin(const char* frame, size_t len) {
  wire::Fin f;
  if (!wire::Read(frame, len, &f)) return;
  Conn* c = conns_.Find(f.head.dst);
  SendOp* op = send_ops_.Find(f.op_id);
  if (c == nullptr || op == nullptr || op->conn != c ||
      op->state != SendOp::State::kAwaitFin) {
    return;  // the send was cancelled meanwhile
  }
  if (f.status == FERRY_OK) {
    CompleteSendOp(op, FERRY_OK, "");
  } else {
    CompleteSendOp(op, FERRY_ABORTED,
                   Format("fabric: the receiver could not read this message's "
                          "large segments (its status %d)",
                          f.status));
  }
  if (c->close_called) CheckClose(c);
}

Placement* Context::NewPlacement(Conn* c, void* user_data, uint64_t sender_op) {
  Placement* p = free_placements_;
  if (p != nullptr) {
    free_placements_ = p->next;
    p->next = nullptr;
  } else {
    placement_store_.push_back(std::make_unique<Placement>());
    p = placement_store_.back().get();
  }
  p->conn = c;
  p->conn_id = c->id;
  p->user_data = user_data;
  p->sender_op = sender_op;
  return p;
}

Status Context::StartReads(Conn* c, RxMsg* m, const ferry_place_args_t& a, Placement* p) {
  for (size_t i = 0; i < m->segs.size(); ++i) {
    const BulkSeg& seg = m->bulk[i];
    if (seg.mode != wire::kRma) continue;
    const auto* d = FERRY_ELEMENT_AT(const ferry_place_dest_t, a.dests, a.dest_stride, i);
    if (d->data == nullptr || seg.length == 0) continue;
    ferry_device_t device{FERRY_DEVICE_CPU, 0};
    if (FERRY_FIELD_PRESENT(d, ferry_place_dest_t, device)) device = d->device;
    const HostMr* hm = FERRY_FIELD_PRESENT(d, ferry_place_dest_t, mr)
                           ? reinterpret_cast<const HostMr*>(d->mr)
                           : nullptr;
    char* dest = static_cast<char*>(d->data);
    void* desc = nullptr;
    if (hm != nullptr && hm->Covers(dest, seg.length)) {
      desc = hm->desc;
    } else if (registrar_->NeedsLocalDesc(device)) {
      fid_mr* mr = nullptr;
      Status st = registrar_->Register(dest, seg.length, device, FI_READ, &mr);
      if (!st.ok()) {
        p->Fail(st.code, st.message);
        break;
      }
      p->regs.emplace_back(registrar_.get(), mr);
      desc = fi_mr_desc(mr);
    }
    for (uint64_t off = 0; off < seg.length; off += max_read_) {
      ReadOp* r = NewReadOp();
      r->placement = p;
      r->local = dest + off;
      r->length = std::min<uint64_t>(max_read_, seg.length - off);
      r->desc = desc;
      r->raddr = seg.remote.addr + off;
      r->key = seg.remote.key;
      r->next = nullptr;
      if (reads_tail_ != nullptr) {
        reads_tail_->next = r;
      } else {
        reads_head_ = r;
      }
      reads_tail_ = r;
      ++p->reads_pending;
    }
  }
  // PumpReads() finishes (and recycles) a placement whose last queued read
  // it drops, as it does when the sender's endpoint in this process is gone:
  // p may be touched afterwards only when it queued no read.
  const bool queued = p->reads_pending > 0;
  PumpReads();
  if (!queued) MaybeFinishPlacement(p);
  return Status();
}

void Context::PumpReads() {
  while (reads_head_ != nullptr) {
    ReadOp* r = reads_head_;
    Placement* p = r->placement;
    Conn* c = p->conn;
    ssize_t rc = 0;
    bool drop = p->cancelled || p->status != FERRY_OK;
    if (!drop && c->peer->Unreachable()) {
      p->Fail(FERRY_PEER_GONE, "fabric: the sender's endpoint " + c->peer->printable +
                                   " (in this process) has been closed");
      drop = true;
    }
    if (!drop) {
      rc = fi_read(endpoint_->ep(), r->local, r->length, r->desc, c->peer->addr, r->raddr,
                   r->key, AsContext(r));
      if (rc == -FI_EAGAIN) return;  // the next progress() posts the rest
    }
    reads_head_ = r->next;
    if (reads_head_ == nullptr) reads_tail_ = nullptr;
    --p->reads_pending;
    if (!drop && rc == 0) {
      ++p->reads_in_flight;
      continue;
    }
    if (!drop) {
      p->Fail(StatusForCompletionError(static_cast<int>(-rc)),
              "fabric: reading the sender's segment: " +
                  FiText("fi_read", static_cast<int>(rc), provider_));
    }
    FreeReadOp(r);
    MaybeFinishPlacement(p);
  }
}

void Context::OnReadCompletion(ReadOp* r, const fi_cq_err_entry* err) {
  Placement* p = r->placement;
  --p->reads_in_flight;
  if (err != nullptr) {
    p->Fail(StatusForCompletionError(err->err),
            "fabric: RMA read from " + p->conn->peer->printable +
                " failed: " + CqErrorText(endpoint_->cq(), *err, provider_));
  }
  FreeReadOp(r);
  MaybeFinishPlacement(p);
}

ReadOp* Context::NewReadOp() {
  ReadOp* r = free_read_ops_;
  if (r != nullptr) {
    free_read_ops_ = r->next;
    r->next = nullptr;
    return r;
  }
  read_op_store_.push_back(std::make_unique<ReadOp>());
  return read_op_store_.back().get();
}

void Context::FreeReadOp(ReadOp* r) {
  r->placement = nullptr;
  r->next = free_read_ops_;
  free_read_ops_ = r;
}

void Context::MaybeFinishPlacement(Placement* p) {
  if (p->reads_pending != 0 || p->reads_in_flight != 0) return;
  if (p->stream && !p->cancelled && p->status == FERRY_OK &&
      p->bytes_received < p->bytes_expected) {
    return;
  }
  FinishPlacement(p);
}

void Context::FinishPlacement(Placement* p) {
  Conn* c = p->conn;
  auto it = std::find(c->placements.begin(), c->placements.end(), p);
  if (it != c->placements.end()) c->placements.erase(it);
  if (p->stream) placements_.Remove(p->id);
  const ferry_status_t status = p->cancelled ? FERRY_CANCELLED : p->status;
  if (!p->stream && !p->cancelled && c->state == Conn::State::kOpen &&
      !c->peer->Unreachable()) {
    // Also after a failed read: the sender must learn it may let go.
    wire::Fin f{};
    f.head = wire::MakeHead(wire::kFin, c->remote_id);
    f.op_id = p->sender_op;
    f.status = status;
    SendControl(c->peer, c->id, &f, sizeof f);
  }
  if (status == FERRY_OK) {
    Emit(FERRY_EV_PLACE_DONE, c, p->user_data);
  } else {
    EmitError(FERRY_EV_PLACE_DONE, c, p->user_data, status,
              p->cancelled ? "fabric: cancelled: the connection was closed "
                             "before the message's data had landed"
                           : p->message);
  }
  const bool peer_failed = !p->cancelled && p->status == FERRY_PEER_GONE;
  const std::string why = p->message;
  // Release: per-operation registrations go now that nothing reads into
  // the host's buffers any more.
  p->regs.clear();
  p->dests.clear();
  p->id = 0;
  p->conn = nullptr;
  p->conn_id = 0;
  p->user_data = nullptr;
  p->sender_op = 0;
  p->stream = false;
  p->cancelled = false;
  p->status = FERRY_OK;
  p->message.clear();
  p->want_mask = 0;
  p->bytes_expected = 0;
  p->bytes_received = 0;
  p->next = free_placements_;
  free_placements_ = p;

  if (c->ack_owed && c->placements.empty()) {
    c->ack_owed = false;
    SendDisconnectAck(c);
  }
  if (peer_failed) Break(c, FERRY_PEER_GONE, why);
  if (c->close_called) CheckClose(c);
}

}  // namespace ferry_fabric
