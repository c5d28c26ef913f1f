// DeliveryOrder: what one source sends reaches the sink in the order it was
// taken off the wire, however many threads pump.
//
// Why: any thread may pump (progress_driver.h), and a pump runs its sink
// callbacks after releasing the progress lock, so two pumping threads could
// otherwise hand the sink a peer's messages, or a message and the peer's
// death, in the wrong order: a reply reported as PEER_GONE although it had
// arrived, a store's ARRIVED read after the same member's LEFT (a shutdown
// barrier broken by a worker that had reached it).
//
// How: each source (a member peer, or a store connection) is a strand, a
// queue of deliveries. The pump queues a delivery on its source's strand
// under the engine's lock, in event order; the first pump to find a strand
// idle owns it and, after the locks are released, runs its queue to the
// end, including what other pumps queued meanwhile. A pump that finds the
// strand owned only queues: no thread ever waits for another's strand.
//
// A delivery that waits for progress (a continuation making a nested
// synchronous call) would hold its strand while it waits, and its own
// source's later messages (its reply, for one) would queue behind it:
// Engine::WaitUntil calls BeforeWait() first, which runs what is queued
// and gives the strand up, so later deliveries run on whichever thread
// pumps them.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ferry {

class DeliveryOrder {
 public:
  using Action = std::function<void()>;
  enum class Source : uint8_t { kMember, kStore };

  // Queues `deliver` behind `id`'s earlier deliveries. Called in event
  // order (under the engine's lock). If this makes the caller the strand's
  // owner, appends to `actions` the job that runs the strand's queue, to
  // be run after the locks are released. `last`: the source ends here (a
  // peer gone, a store connection closed): its strand is freed once run.
  void Queue(Source source, uint64_t id, Action deliver, bool last,
             std::vector<Action>* actions);

  // Call on any thread before it waits for progress: a delivery running on
  // this thread gives its strand up, after running what is queued on it.
  static void BeforeWait();

 private:
  struct Strand {
    std::deque<Action> queue;
    uint64_t owner = 0;  // the owning run's token; 0: idle
    bool ended = false;
  };
  struct Key {
    Source source;
    uint64_t id;
    bool operator==(const Key& o) const { return source == o.source && id == o.id; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.id) ^
             (k.source == Source::kStore ? 0x9e3779b97f4a7c15 : 0);
    }
  };
  // One run of a strand's queue on this thread, innermost last.
  struct Run {
    DeliveryOrder* order;
    Key key;
    std::shared_ptr<Strand> strand;
    uint64_t token;
    Run* outer;
  };

  // Runs `strand`'s queue while `token` owns it.
  void RunQueue(const Key& key, const std::shared_ptr<Strand>& strand, uint64_t token);

  static thread_local Run* innermost_;

  std::mutex mu_;  // strands_, every Strand's fields, next_token_
  std::unordered_map<Key, std::shared_ptr<Strand>, KeyHash> strands_;
  uint64_t next_token_ = 1;
};

}  // namespace ferry
