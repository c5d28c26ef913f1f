// What an epoll registration points at: a listener, a connection or the
// context's wakeup eventfd. The magic catches a host passing one plugin
// handle where another is expected (or a stale one) before it is used.
#pragma once

#include <cstdint>

namespace ferry_tcp {

class Pollable {
 public:
  enum class Kind : uint32_t {
    kConn = 0x636f6e6e,      // "conn"
    kListener = 0x6c69736e,  // "lisn"
    kWakeup = 0x77616b65,    // "wake"
    kDead = 0x64656164,      // "dead": set by destructors
  };

  explicit Pollable(Kind kind) : kind_(kind) {}
  virtual ~Pollable() { kind_ = Kind::kDead; }
  Pollable(const Pollable&) = delete;
  Pollable& operator=(const Pollable&) = delete;

  Kind kind() const { return kind_; }
  // Handles the readiness bits epoll reported (context lock held).
  virtual void OnEpoll(uint32_t events) = 0;

 private:
  Kind kind_;
};

}  // namespace ferry_tcp
