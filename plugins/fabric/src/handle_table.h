// Ids that name plugin objects on the wire (connections, send operations
// waiting for the peer, placements receiving a stream): slot index in the
// low 32 bits, a generation in the high 32. A frame that names an object
// which is gone (or whose slot was reused) misses the lookup instead of
// reaching the wrong object, and a lookup is one bounds check and one
// compare: no hashing on the hot path.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry_fabric {

template <typename T>
class HandleTable {
 public:
  // Never returns 0, so 0 can mean "none" on the wire.
  uint64_t Insert(T* object) {
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      index = static_cast<uint32_t>(slots_.size());
      slots_.push_back(Slot{});
    }
    Slot& s = slots_[index];
    s.object = object;
    return (static_cast<uint64_t>(s.generation) << 32) | index;
  }

  T* Find(uint64_t id) const {
    uint32_t index = static_cast<uint32_t>(id);
    uint32_t generation = static_cast<uint32_t>(id >> 32);
    if (index >= slots_.size()) return nullptr;
    const Slot& s = slots_[index];
    return s.generation == generation ? s.object : nullptr;
  }

  void Remove(uint64_t id) {
    uint32_t index = static_cast<uint32_t>(id);
    if (index >= slots_.size() || Find(id) == nullptr) return;
    Slot& s = slots_[index];
    s.object = nullptr;
    // Generation 0 is never handed out again, so no id is ever 0.
    if (++s.generation == 0) s.generation = 1;
    free_.push_back(index);
  }

  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.object != nullptr) fn(s.object);
    }
  }

 private:
  struct Slot {
    T* object = nullptr;
    uint32_t generation = 1;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
};

}  // namespace ferry_fabric
