// A listening socket. listen("") picks a fresh path in the private socket
// directory; close_listener() unlinks it at once. The Listener object itself
// is freed by the next progress() (an epoll result may still point at it).
#pragma once

#include "pollable.h"

#include <atomic>
#include <memory>
#include <string>

namespace ferry_shm {

class Context;

struct Listener {
  Context* owner = nullptr;  // close_listener() gets only this handle
  int fd = -1;
  std::string path;
  void* user_data = nullptr;
  Pollable poll{Pollable::kListener, this};
  // Shared with connections accepted but not yet reported: once the
  // listener is closed they are dropped instead of reported.
  std::shared_ptr<std::atomic<bool>> open = std::make_shared<std::atomic<bool>>(true);
};

}  // namespace ferry_shm
