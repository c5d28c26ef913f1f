// Converting between the ABI's opaque handles and the plugin's objects.
// Connection and listener handles are Pollable pointers, so a handle of the
// wrong kind (or one already freed and poisoned) is recognised before use.
#pragma once

#include "connection.h"
#include "context.h"
#include "listener.h"

#include <ferry/transport.h>

namespace ferry_tcp {

inline ferry_context_t* ToHandle(Context* c) {
  return reinterpret_cast<ferry_context_t*>(c);
}
inline Context* FromHandle(ferry_context_t* h) {
  return reinterpret_cast<Context*>(h);
}

inline ferry_conn_t* ToHandle(Conn* c) {
  return reinterpret_cast<ferry_conn_t*>(static_cast<Pollable*>(c));
}
inline Conn* FromHandle(ferry_conn_t* h) {
  auto* p = reinterpret_cast<Pollable*>(h);
  return (p != nullptr && p->kind() == Pollable::Kind::kConn) ? static_cast<Conn*>(p)
                                                              : nullptr;
}

inline ferry_listener_t* ToHandle(Listener* l) {
  return reinterpret_cast<ferry_listener_t*>(static_cast<Pollable*>(l));
}
inline Listener* FromHandle(ferry_listener_t* h) {
  auto* p = reinterpret_cast<Pollable*>(h);
  return (p != nullptr && p->kind() == Pollable::Kind::kListener)
             ? static_cast<Listener*>(p)
             : nullptr;
}

}  // namespace ferry_tcp
