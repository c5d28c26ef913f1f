// ferry::DeliveryOrder (delivery_order.h).
#include "engine/delivery_order.h"

namespace ferry {

thread_local DeliveryOrder::Run* DeliveryOrder::innermost_ = nullptr;

void DeliveryOrder::Queue(Source source, uint64_t id, Action deliver, bool last,
                          std::vector<Action>* actions) {
  const Key key{source, id};
  std::shared_ptr<Strand> strand;
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    // A strand stays while its source lives: one allocation per source,
    // not one per message.
    auto& slot = strands_[key];
    if (!slot) slot = std::make_shared<Strand>();
    slot->queue.push_back(std::move(deliver));
    if (last) slot->ended = true;
    if (slot->owner != 0) return;  // its owner runs this too
    token = slot->owner = next_token_++;
    strand = slot;
  }
  actions->push_back(
      [this, key, strand = std::move(strand), token] { RunQueue(key, strand, token); });
}

void DeliveryOrder::RunQueue(const Key& key, const std::shared_ptr<Strand>& strand,
                             uint64_t token) {
  // Published for BeforeWait; restored however the deliveries end.
  struct Scope {
    explicit Scope(Run* r) : run(r) { innermost_ = r; }
    ~Scope() { innermost_ = run->outer; }
    Run* run;
  };
  Run run{this, key, strand, token, innermost_};
  Scope scope(&run);
  for (;;) {
    Action next;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (strand->owner != token) return;  // BeforeWait gave it up
      if (strand->queue.empty()) {
        strand->owner = 0;
        if (strand->ended) {
          auto it = strands_.find(key);
          if (it != strands_.end() && it->second == strand) strands_.erase(it);
        }
        return;
      }
      next = std::move(strand->queue.front());
      strand->queue.pop_front();
    }
    next();
  }
}

void DeliveryOrder::BeforeWait() {
  // Every strand this thread is running, innermost first. Each one's
  // queue runs to its end now, under a new token, before the wait begins;
  // the run that was interrupted finds its token gone and stops when the
  // wait returns.
  for (Run* r = innermost_; r != nullptr; r = r->outer) {
    uint64_t fresh = 0;
    {
      std::lock_guard<std::mutex> l(r->order->mu_);
      if (r->strand->owner != r->token) continue;
      fresh = r->strand->owner = r->order->next_token_++;
    }
    r->order->RunQueue(r->key, r->strand, fresh);
  }
}

}  // namespace ferry
