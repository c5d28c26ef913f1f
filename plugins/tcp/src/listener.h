// A listening socket. Accepting happens in progress(): each new connection
// becomes a Conn and a FERRY_EV_ACCEPTED event.
#pragma once

#include "pollable.h"

#include <string>

namespace ferry_tcp {

class Context;

class Listener final : public Pollable {
 public:
  Listener(Context* ctx, int fd, std::string address, void* user_data)
      : Pollable(Kind::kListener),
        ctx_(ctx),
        fd_(fd),
        address_(std::move(address)),
        user_data_(user_data) {}
  ~Listener() override;

  Context* context() const { return ctx_; }
  int fd() const { return fd_; }
  // What peers pass to connect(); immutable, so readable without the lock.
  const std::string& address() const { return address_; }

  // Accepts every pending connection (edge-triggered: until EAGAIN).
  void OnEpoll(uint32_t events) override;

 private:
  Context* ctx_;
  int fd_;
  std::string address_;
  void* user_data_;
};

}  // namespace ferry_tcp
