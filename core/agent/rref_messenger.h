// ferry::RRefMessenger: the RRef protocol's messages between workers, over
// the engine. The RRef context (rref/) decides what to send and when to
// retry; this sends each CONTROL message, queues acknowledgements and sends
// them as one CONTROL_ACK per peer from a 1 ms timer (a lost one is covered
// by the sender's retry), and hands arriving CONTROL / CONTROL_ACK messages
// to the context.
#pragma once

#include "engine/engine.h"
#include "rref/rref_context.h"
#include "wire/messages.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace ferry {

class RRefMessenger {
 public:
  RRefMessenger(Engine& engine, RRefContext& rrefs) : engine_(engine), rrefs_(rrefs) {}

  // RRefContext::Hooks.
  void SendControl(uint64_t to, const wire::Control& c);
  void QueueAck(uint64_t to, uint64_t control_id);
  // Sends the queued acknowledgements (the timer's job).
  void FlushAcks();

  // Arrivals from member `from`.
  void OnControl(PeerKey from, const InMessage& msg);
  void OnControlAck(PeerKey from, const InMessage& msg);
  // A CONTROL the engine recognised as a duplicate: acknowledged again,
  // because the first acknowledgement may have been lost.
  void OnDuplicateControl(PeerKey from, const InMessage& msg);

 private:
  Engine& engine_;
  RRefContext& rrefs_;
  std::mutex mu_;  // acks_to_send_
  std::map<uint64_t, std::vector<uint64_t>> acks_to_send_;
};

}  // namespace ferry
