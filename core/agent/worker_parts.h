// What the call tables (IncomingCalls, OutgoingCalls) share of the worker
// they belong to: its options and stopped flag, a weak reference to the
// Agent (a callback that outlives a call takes it to keep the worker alive
// while it runs), and the parts a call goes through. The Agent owns all of
// them and both tables, and destroys the tables first.
#pragma once

#include "agent/options.h"
#include "agent/value_codec.h"
#include "engine/engine.h"
#include "membership/member_table.h"
#include "rref/rref_context.h"

#include <atomic>
#include <memory>

namespace ferry {

struct WorkerParts {
  const AgentOptions& options;
  const std::atomic<bool>& stopped;
  std::weak_ptr<void> owner;
  Engine& engine;
  RRefContext& rrefs;
  ValueCodec& codec;
  const MemberTable& members;
};

}  // namespace ferry
