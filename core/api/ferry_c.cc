// The public C API (abi/include/ferry/ferry.h) over ferry::Agent. Every
// entry point catches C++ exceptions: none crosses the C boundary.
#include <ferry/ferry.h>

#include "agent/agent.h"
#include "agent/debug_client.h"
#include "agent/value_codec.h"
#include "api/last_error.h"
#include "common/log.h"
#include "loader/plugin_loader.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

using ferry::Agent;
using ferry::Status;
using ferry::Value;
using ferry::api::Fail;
using ferry::api::Ok;
using std::chrono::milliseconds;

struct ferry_worker {
  std::shared_ptr<Agent> agent;
  std::string name;
  std::string store_address;
};
struct ferry_future {
  std::shared_ptr<ferry::Future> future;
  std::shared_ptr<Agent> agent;
};
struct ferry_rref {
  std::shared_ptr<ferry::RRefHandle> handle;
  std::shared_ptr<Agent> agent;
};
struct ferry_message {
  Value value;
  std::shared_ptr<Agent> agent;
};

namespace {

// `auto` skips a plugin file that does not load; it says so once per file
// and process, at warning level (a broken install should not look like a
// transport that is merely absent). Plugins that load but cannot run here
// (no GPU, no EFA device) are not broken and say nothing.
void WarnOnceOfBrokenPlugins(const std::vector<ferry::LoadRecord>& records) {
  static std::mutex mu;
  static std::set<std::string>* warned = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  for (const ferry::LoadRecord& r : records) {
    if (r.loaded || r.filtered || !warned->insert(r.path).second) continue;
    FERRY_LOG(FERRY_LOG_WARN, "loader",
              "transport 'auto' skipped " + r.path + ": " + r.reason +
                  " (`ferry info` lists every plugin and why it does not load)");
  }
}

std::string EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

ferry::StatusOr<Value> ToValue(const ferry_payload_t* p) {
  Value v;
  if (p == nullptr) return v;
  if (p->struct_size < FERRY_STRUCT_SIZE(ferry_payload_t, num_bytes)) {
    return Status(FERRY_INVALID_ARGUMENT,
                  "ferry_payload_t.struct_size is too small: "
                  "set it to FERRY_PAYLOAD_STRUCT_SIZE");
  }
  if (p->num_bytes > 0 && p->bytes == nullptr) {
    return Status(FERRY_INVALID_ARGUMENT, "payload has num_bytes > 0 but bytes is NULL");
  }
  if (p->num_bytes > 0) v.bytes.assign(static_cast<const char*>(p->bytes), p->num_bytes);
  if (FERRY_FIELD_PRESENT(p, ferry_payload_t, tensors) && p->num_tensors > 0) {
    if (p->tensors == nullptr) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "payload has num_tensors > 0 but tensors is NULL");
    }
    v.tensors.assign(p->tensors, p->tensors + p->num_tensors);
  }
  if (FERRY_FIELD_PRESENT(p, ferry_payload_t, stream)) v.stream = p->stream;
  if (FERRY_FIELD_PRESENT(p, ferry_payload_t, num_rrefs) && p->num_rrefs > 0) {
    if (p->rrefs == nullptr) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "payload has num_rrefs > 0 but rrefs is NULL");
    }
    for (uint32_t i = 0; i < p->num_rrefs; ++i) {
      if (p->rrefs[i] == nullptr) {
        return Status(FERRY_INVALID_ARGUMENT,
                      "payload rref " + std::to_string(i) + " is NULL");
      }
      v.rrefs.push_back(p->rrefs[i]->handle);
    }
  }
  return v;
}

void DropTensors(const ferry_payload_t* p);

// A payload about to be sent: ToValue, then the host tensors the payload
// does not mark zero-copy are copied (value_codec.h, SnapshotHostTensors),
// so that what arrives is what they held now. `caller_waits`: ferry_rpc_sync,
// whose caller gets control back only with the reply, which the callee
// sends after every byte arrived: nothing to copy. On failure the payload's
// tensors are freed.
ferry::StatusOr<Value> ToSentValue(const ferry_payload_t* p, bool caller_waits) {
  auto v = ToValue(p);
  if (!v.ok()) {
    DropTensors(p);
    return v;
  }
  const uint64_t zero_copy =
      caller_waits
          ? FERRY_ZERO_COPY_ALL
          : (FERRY_FIELD_PRESENT(p, ferry_payload_t, zero_copy) ? p->zero_copy : 0);
  Status s = ferry::SnapshotHostTensors(v.value(), zero_copy);
  if (!s.ok()) return s;  // v's tensors are freed with it
  return v;
}

// Tensors are taken even when the call fails early: free them.
void DropTensors(const ferry_payload_t* p) {
  if (p == nullptr || !FERRY_FIELD_PRESENT(p, ferry_payload_t, tensors) ||
      p->tensors == nullptr) {
    return;
  }
  for (uint32_t i = 0; i < p->num_tensors; ++i) {
    if (p->tensors[i] != nullptr && p->tensors[i]->deleter != nullptr) {
      p->tensors[i]->deleter(p->tensors[i]);
    }
  }
}

// The job secret: `given`, else the contents of FERRY_SECRET_FILE (without
// a trailing newline), else FERRY_SECRET, else "".
Status ResolveSecret(const char* given, std::string* secret) {
  if (given != nullptr) {
    *secret = given;
    return Status::Ok();
  }
  const char* file = std::getenv("FERRY_SECRET_FILE");
  if (file == nullptr || *file == '\0') {
    *secret = EnvOr("FERRY_SECRET", "");
    return Status::Ok();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return Status(FERRY_NOT_FOUND, std::string("FERRY_SECRET_FILE=") + file +
                                       " cannot be read: check the path and permissions");
  }
  std::stringstream buf;
  buf << in.rdbuf();
  *secret = buf.str();
  while (!secret->empty() && (secret->back() == '\n' || secret->back() == '\r')) {
    secret->pop_back();
  }
  return Status::Ok();
}

// Copies `text` and its NUL into `buf` when `cap` holds them (the debug
// dump's buffer contract, ferry.h); RESOURCE_EXHAUSTED otherwise. `*len`
// is set either way.
ferry_status_t CopyOut(const std::string& text, char* buf, uint64_t cap, uint64_t* len,
                       const char* function) {
  *len = text.size();
  if (cap < text.size() + 1) {
    return Fail(FERRY_RESOURCE_EXHAUSTED,
                std::string(function) + ": the dump is " + std::to_string(text.size()) +
                    " bytes and the buffer holds " + std::to_string(cap) +
                    ": call again with cap >= len + 1");
  }
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return Ok();
}

milliseconds Ms(uint32_t ms) {
  return milliseconds(ms);
}

// A whole number in [0, max] from environment variable `name` (set and
// not empty), into *out; INVALID_ARGUMENT naming it otherwise.
Status EnvNumber(const char* name, long long max, long long* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return Status(FERRY_INVALID_ARGUMENT, std::string(name) + " is not set");
  }
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < 0 || n > max) {
    return Status(FERRY_INVALID_ARGUMENT, std::string(name) + "='" + v +
                                              "' is not a whole number in 0.." +
                                              std::to_string(max));
  }
  *out = n;
  return Status::Ok();
}

// The worker's limits (ferry.h, ferry_limits_t; docs/limits.md): each field
// the application set, else its environment variable, else its default.
Status ResolveLimits(const ferry_worker_options_t* o, ferry::Limits* out) {
  ferry::Limits l = ferry::Limits::Unset();
  const ferry_limits_t* in =
      FERRY_FIELD_PRESENT(o, ferry_worker_options_t, limits) ? o->limits : nullptr;
  if (in != nullptr) {
    if (!FERRY_FIELD_PRESENT(in, ferry_limits_t, max_calls_in_flight_per_peer)) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "ferry_limits_t.struct_size is " + std::to_string(in->struct_size) +
                        ", too small: set it to FERRY_LIMITS_STRUCT_SIZE");
    }
    l.max_calls_in_flight_per_peer = in->max_calls_in_flight_per_peer;
    if (FERRY_FIELD_PRESENT(in, ferry_limits_t, max_message_size)) {
      l.max_message_size = in->max_message_size;
    }
    if (FERRY_FIELD_PRESENT(in, ferry_limits_t, max_queued_bytes_per_connection)) {
      l.max_queued_bytes_per_connection = in->max_queued_bytes_per_connection;
    }
    if (FERRY_FIELD_PRESENT(in, ferry_limits_t, max_queued_calls)) {
      l.max_queued_calls = in->max_queued_calls;
    }
    if (FERRY_FIELD_PRESENT(in, ferry_limits_t, max_connections)) {
      l.max_connections = in->max_connections;
    }
    if (FERRY_FIELD_PRESENT(in, ferry_limits_t, handshake_timeout_ms)) {
      l.handshake_timeout = Ms(in->handshake_timeout_ms);
    }
  }
  if (Status s = l.Resolve(); !s.ok()) return s;
  *out = l;
  return Status::Ok();
}

// The job's kind (ferry.h, ferry_worker_options_t.world_size): the
// options, else WORLD_SIZE / RANK as torchrun sets them, else elastic.
Status ResolveJobKind(const ferry_worker_options_t* o, ferry::AgentOptions* ao) {
  const bool present = FERRY_FIELD_PRESENT(o, ferry_worker_options_t, rank);
  const uint32_t world_size = present ? o->world_size : 0;
  const int32_t rank = present ? o->rank : -1;
  if (world_size > 0) {
    ao->world_size = world_size;
    if (rank >= 0) {
      ao->rank = rank;
      return Status::Ok();
    }
    long long r = 0;
    Status s = EnvNumber("RANK", INT32_MAX, &r);
    if (!s.ok()) {
      return Status(FERRY_INVALID_ARGUMENT,
                    "world_size " + std::to_string(world_size) +
                        " is given with a negative rank, which means the environment's "
                        "RANK, but " +
                        s.message() + ": pass a rank in 0.." +
                        std::to_string(world_size - 1));
    }
    ao->rank = static_cast<int32_t>(r);
    return Status::Ok();
  }
  const char* ws = std::getenv("WORLD_SIZE");
  if ((o->flags & FERRY_WORKER_ELASTIC) != 0 || ws == nullptr || *ws == '\0') {
    return Status::Ok();  // elastic
  }
  long long n = 0, r = 0;
  Status s = EnvNumber("WORLD_SIZE", INT32_MAX, &n);
  if (s.ok() && n == 0) {
    s = Status(FERRY_INVALID_ARGUMENT, "WORLD_SIZE=0 names no workers");
  }
  if (s.ok()) s = EnvNumber("RANK", INT32_MAX, &r);
  if (!s.ok()) {
    return Status(
        FERRY_INVALID_ARGUMENT,
        "this worker names no world_size, so it takes the static job the "
        "environment describes (WORLD_SIZE, RANK, as torchrun sets them), but " +
            s.message() +
            ": set both, or start an elastic worker with FERRY_WORKER_ELASTIC "
            "(or without WORLD_SIZE)");
  }
  ao->world_size = static_cast<uint32_t>(n);
  ao->rank = static_cast<int32_t>(r);
  return Status::Ok();
}

}  // namespace

extern "C" {

uint32_t ferry_api_version(void) {
  return (FERRY_API_VERSION_MAJOR << 16) | FERRY_API_VERSION_MINOR;
}

const char* ferry_last_error(void) {
  return ferry::api::last_error.c_str();
}

const char* ferry_status_name(ferry_status_t code) {
  return ferry::StatusCodeName(code);
}

ferry_status_t ferry_worker_start(const ferry_worker_options_t* o, ferry_worker_t** out) {
  FERRY_API_GUARD({
    if (o == nullptr || out == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_worker_start: options and out are required");
    }
    if (o->struct_size < FERRY_STRUCT_SIZE(ferry_worker_options_t, secret)) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_worker_options_t.struct_size is too small: set it to "
                  "FERRY_WORKER_OPTIONS_STRUCT_SIZE");
    }
    ferry::AgentOptions ao;
    ao.name = o->name ? o->name : "";
    ao.job = o->job ? o->job : EnvOr("FERRY_JOB", "default");
    const std::string transport =
        o->transport ? o->transport : EnvOr("FERRY_TRANSPORT", "tcp");
    bool auto_select = false;
    ao.transports.clear();
    if (transport == "auto") {
      auto_select = true;
      ferry::PluginLoader loader;
      for (const auto& p : loader.LoadAll()) {
        if (p->name() != "chaos") ao.transports.push_back(p->name());
      }
      WarnOnceOfBrokenPlugins(loader.records());
    } else {
      std::stringstream ss(transport);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) ao.transports.push_back(item);
      }
    }
    if (ao.transports.empty()) {
      return Fail(FERRY_NOT_FOUND, "no transport plugin to use (transport '" + transport +
                                       "'): run `ferry info` to see what is found");
    }
    ao.store_address = o->store_address ? o->store_address : EnvOr("FERRY_STORE", "");
    ao.host_store = (o->flags & FERRY_WORKER_HOST_STORE) != 0;
    ao.busy_poll = (o->flags & FERRY_WORKER_BUSY_POLL) != 0;
    if (Status s = ResolveSecret(o->secret, &ao.secret); !s.ok()) return Fail(s);
    if (FERRY_FIELD_PRESENT(o, ferry_worker_options_t, default_timeout_ms) &&
        o->default_timeout_ms) {
      ao.default_timeout = Ms(o->default_timeout_ms);
    }
    if (FERRY_FIELD_PRESENT(o, ferry_worker_options_t, peer_timeout_ms) &&
        o->peer_timeout_ms) {
      ao.peer_timeout = Ms(o->peer_timeout_ms);
    }
    if (FERRY_FIELD_PRESENT(o, ferry_worker_options_t, join_timeout_ms) &&
        o->join_timeout_ms) {
      ao.join_timeout = Ms(o->join_timeout_ms);
    }
    if (FERRY_FIELD_PRESENT(o, ferry_worker_options_t, executor_threads) &&
        o->executor_threads) {
      ao.executor_threads = o->executor_threads;
    }
    if (FERRY_FIELD_PRESENT(o, ferry_worker_options_t, device_allocator) &&
        o->device_allocator != nullptr) {
      const ferry_device_allocator_t* a = o->device_allocator;
      if (a->struct_size < FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE) {
        return Fail(FERRY_INVALID_ARGUMENT,
                    "ferry_device_allocator_t.struct_size is " +
                        std::to_string(a->struct_size) +
                        ", too small: set it to FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE");
      }
      if (a->alloc == nullptr || a->free == nullptr) {
        return Fail(FERRY_INVALID_ARGUMENT,
                    std::string("ferry_worker_options_t.device_allocator needs both "
                                "functions, and its ") +
                        (a->alloc == nullptr ? "alloc" : "free") +
                        " is NULL (pass NULL as device_allocator to use the device "
                        "transport's own allocator)");
      }
      ao.device_allocator = ferry::AppDeviceAllocator{a->user_data, a->alloc, a->free};
    }
    if (Status s = ResolveJobKind(o, &ao); !s.ok()) return Fail(s);
    if (FERRY_FIELD_PRESENT(o, ferry_worker_options_t, start_timeout_ms) &&
        o->start_timeout_ms) {
      ao.start_timeout = Ms(o->start_timeout_ms);
    }
    if (Status s = ResolveLimits(o, &ao.limits); !s.ok()) return Fail(s);
    ao.auto_select = auto_select;
    auto agent = Agent::Start(std::move(ao));
    if (!agent.ok()) return Fail(agent.status());
    auto* w = new ferry_worker();
    w->agent = agent.value();
    w->name = w->agent->name();
    w->store_address = w->agent->store_address();
    *out = w;
    return Ok();
  })
}

ferry_status_t ferry_worker_shutdown(ferry_worker_t* w, uint32_t timeout_ms) {
  return ferry_worker_shutdown_ex(w, FERRY_SHUTDOWN_GRACEFUL, timeout_ms);
}

ferry_status_t ferry_worker_shutdown_ex(ferry_worker_t* w, uint32_t flags,
                                        uint32_t timeout_ms) {
  FERRY_API_GUARD({
    if (w == nullptr) return Fail(FERRY_INVALID_ARGUMENT, "worker is NULL");
    if ((flags & ~FERRY_SHUTDOWN_IMMEDIATE) != 0) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_worker_shutdown_ex: unknown flags " + std::to_string(flags) +
                      " (FERRY_SHUTDOWN_GRACEFUL or FERRY_SHUTDOWN_IMMEDIATE)");
    }
    const Agent::ShutdownMode mode = (flags & FERRY_SHUTDOWN_IMMEDIATE) != 0
                                         ? Agent::ShutdownMode::kImmediate
                                         : Agent::ShutdownMode::kGraceful;
    return Fail(w->agent->Shutdown(
        mode, timeout_ms == FERRY_NO_TIMEOUT ? milliseconds::max() : Ms(timeout_ms)));
  })
}

void ferry_worker_destroy(ferry_worker_t* w) {
  if (w == nullptr) return;
  try {
    w->agent->Shutdown(Agent::ShutdownMode::kImmediate, Ms(0));
  } catch (...) {
  }
  delete w;
}

uint64_t ferry_worker_id(const ferry_worker_t* w) {
  return w ? w->agent->id() : 0;
}
int32_t ferry_worker_rank(const ferry_worker_t* w) {
  return w ? w->agent->rank() : -1;
}
uint32_t ferry_worker_world_size(const ferry_worker_t* w) {
  return w ? w->agent->world_size() : 0;
}
const char* ferry_worker_name(const ferry_worker_t* w) {
  return w ? w->name.c_str() : "";
}
const char* ferry_worker_store_address(const ferry_worker_t* w) {
  return w ? w->store_address.c_str() : "";
}

ferry_status_t ferry_worker_members(ferry_worker_t* w, ferry_member_t* out,
                                    uint32_t capacity, uint32_t* count) {
  FERRY_API_GUARD({
    if (w == nullptr || count == nullptr || (capacity > 0 && out == nullptr)) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_worker_members: worker, out and count needed");
    }
    // Strings must outlive the call: keep the last answer per thread.
    static thread_local std::vector<ferry::MemberInfo> keep;
    keep = w->agent->Members();
    *count = static_cast<uint32_t>(keep.size());
    // A 0.1 caller's elements end at `transport` and it never set
    // struct_size; a 0.2 caller says FERRY_MEMBER_STRUCT_SIZE in out[0].
    const size_t stride = capacity > 0 && out[0].struct_size == FERRY_MEMBER_STRUCT_SIZE
                              ? FERRY_MEMBER_STRUCT_SIZE
                              : FERRY_STRUCT_SIZE(ferry_member_t, transport);
    for (uint32_t i = 0; i < capacity && i < keep.size(); ++i) {
      ferry_member_t c{};
      c.struct_size = static_cast<uint32_t>(stride);
      c.state = static_cast<int32_t>(keep[i].state);
      c.id = keep[i].id;
      c.incarnation = keep[i].incarnation;
      c.name = keep[i].name.c_str();
      c.transport = keep[i].transport.c_str();
      c.rank = keep[i].rank;
      std::memcpy(reinterpret_cast<char*>(out) + i * stride, &c, stride);
    }
    return Ok();
  })
}

ferry_status_t ferry_worker_debug_dump(ferry_worker_t* w, char* buf, uint64_t cap,
                                       uint64_t* len) {
  FERRY_API_GUARD({
    if (w == nullptr || len == nullptr || (cap > 0 && buf == nullptr)) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_worker_debug_dump: worker and len are required, and buf when "
                  "cap > 0");
    }
    return CopyOut(w->agent->DebugDump().dump(2), buf, cap, len,
                   "ferry_worker_debug_dump");
  })
}

ferry_status_t ferry_debug_dump_remote(const char* store_address, const char* job,
                                       const char* worker, const char* secret,
                                       uint32_t timeout_ms, char* buf, uint64_t cap,
                                       uint64_t* len) {
  FERRY_API_GUARD({
    if (len == nullptr || (cap > 0 && buf == nullptr)) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_debug_dump_remote: len is required, and buf when cap > 0");
    }
    ferry::RemoteDumpOptions o;
    o.store_address = store_address ? store_address : EnvOr("FERRY_STORE", "");
    if (o.store_address.empty()) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_debug_dump_remote: no store address: pass the job's "
                  "host:port, or set FERRY_STORE");
    }
    o.job = job ? job : EnvOr("FERRY_JOB", "default");
    o.worker = worker ? worker : "";
    if (Status s = ResolveSecret(secret, &o.secret); !s.ok()) return Fail(s);
    if (timeout_ms != 0) o.timeout = Ms(timeout_ms);
    auto text = ferry::RemoteDebugDump(o);
    if (!text.ok()) return Fail(text.status());
    return CopyOut(text.value(), buf, cap, len, "ferry_debug_dump_remote");
  })
}

ferry_status_t ferry_wait_for_workers(ferry_worker_t* w, uint32_t n,
                                      uint32_t timeout_ms) {
  FERRY_API_GUARD({
    if (w == nullptr) return Fail(FERRY_INVALID_ARGUMENT, "worker is NULL");
    return Fail(w->agent->WaitForWorkers(n, Ms(timeout_ms)));
  })
}

ferry_status_t ferry_on_membership(ferry_worker_t* w, ferry_member_fn fn,
                                   void* user_data) {
  FERRY_API_GUARD({
    if (w == nullptr || fn == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_on_membership: worker and fn needed");
    }
    std::weak_ptr<Agent> weak = w->agent;
    w->agent->OnMembership([fn, user_data, weak](const ferry::MemberInfo& m) {
      std::string transport = m.transport;
      if (auto a = weak.lock(); a && transport.empty() && m.id != a->id()) {
        transport = a->engine().RouteTo(m.id);
      }
      ferry_member_t c{};
      c.struct_size = FERRY_MEMBER_STRUCT_SIZE;
      c.state = static_cast<int32_t>(m.state);
      c.id = m.id;
      c.incarnation = m.incarnation;
      c.name = m.name.c_str();
      c.transport = transport.c_str();
      c.rank = m.rank;
      fn(user_data, &c);
    });
    return Ok();
  })
}

// ---- messages ---------------------------------------------------------------

const void* ferry_message_bytes(const ferry_message_t* m, uint64_t* num_bytes) {
  if (m == nullptr) {
    if (num_bytes) *num_bytes = 0;
    return nullptr;
  }
  if (num_bytes) *num_bytes = m->value.bytes.size();
  return m->value.bytes.data();
}
uint32_t ferry_message_num_tensors(const ferry_message_t* m) {
  return m ? static_cast<uint32_t>(m->value.tensors.size()) : 0;
}
DLManagedTensor* ferry_message_take_tensor(ferry_message_t* m, uint32_t i) {
  if (m == nullptr || i >= m->value.tensors.size()) return nullptr;
  DLManagedTensor* t = m->value.tensors[i];
  m->value.tensors[i] = nullptr;
  return t;
}
uint32_t ferry_message_num_rrefs(const ferry_message_t* m) {
  return m ? static_cast<uint32_t>(m->value.rrefs.size()) : 0;
}
ferry_rref_t* ferry_message_take_rref(ferry_message_t* m, uint32_t i) {
  if (m == nullptr || i >= m->value.rrefs.size() || !m->value.rrefs[i]) return nullptr;
  auto* r = new ferry_rref();
  r->handle = std::move(m->value.rrefs[i]);
  r->agent = m->agent;
  return r;
}
void ferry_message_release(ferry_message_t* m) {
  delete m;
}

// ---- functions and calls ----------------------------------------------------

ferry_status_t ferry_register(ferry_worker_t* w, const char* name, ferry_handler_fn fn,
                              void* user_data, uint32_t flags) {
  FERRY_API_GUARD({
    if (w == nullptr || name == nullptr || fn == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_register: worker, name and fn are required");
    }
    std::weak_ptr<Agent> weak = w->agent;
    auto handler = [fn, user_data, weak](std::unique_ptr<ferry::IncomingCall> call,
                                         Value args) {
      auto* m = new ferry_message();
      m->value = std::move(args);
      m->agent = weak.lock();
      // The call is the handler's now: it answers (and so frees) it.
      fn(user_data, reinterpret_cast<ferry_call_t*>(call.release()), m);
      delete m;
    };
    return Fail(w->agent->Register(name, std::move(handler),
                                   (flags & FERRY_HANDLER_MAY_BLOCK) != 0));
  })
}

ferry_status_t ferry_call_reply(ferry_call_t* call, const ferry_payload_t* result) {
  FERRY_API_GUARD({
    if (call == nullptr) return Fail(FERRY_INVALID_ARGUMENT, "call is NULL");
    std::unique_ptr<ferry::IncomingCall> c(reinterpret_cast<ferry::IncomingCall*>(call));
    auto v = ToSentValue(result, /*caller_waits=*/false);
    if (!v.ok()) {
      c->Fail(Status(FERRY_INVALID_ARGUMENT,
                     "the handler's result was invalid: " + v.status().message()));
      return Fail(v.status());
    }
    return Fail(c->Reply(std::move(v.value())));
  })
}

ferry_status_t ferry_call_fail(ferry_call_t* call, ferry_status_t code,
                               const char* message) {
  FERRY_API_GUARD({
    if (call == nullptr) return Fail(FERRY_INVALID_ARGUMENT, "call is NULL");
    std::unique_ptr<ferry::IncomingCall> c(reinterpret_cast<ferry::IncomingCall*>(call));
    return Fail(
        c->Fail(Status(code == FERRY_OK ? FERRY_UNKNOWN : code, message ? message : "")));
  })
}

uint64_t ferry_call_caller_id(const ferry_call_t* call) {
  return call ? reinterpret_cast<const ferry::IncomingCall*>(call)->caller_id() : 0;
}
const char* ferry_call_caller_name(const ferry_call_t* call) {
  return call ? reinterpret_cast<const ferry::IncomingCall*>(call)->caller_name().c_str()
              : "";
}

const char* ferry_call_function(const ferry_call_t* call) {
  return call ? reinterpret_cast<const ferry::IncomingCall*>(call)->function().c_str()
              : "";
}
uint32_t ferry_call_remaining_ms(const ferry_call_t* call) {
  if (call == nullptr) return UINT32_MAX;
  const auto deadline = reinterpret_cast<const ferry::IncomingCall*>(call)->deadline();
  if (deadline == std::chrono::steady_clock::time_point::max()) return UINT32_MAX;
  const auto left = std::chrono::duration_cast<milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
  if (left <= 0) return 0;
  return left >= UINT32_MAX ? UINT32_MAX - 1 : static_cast<uint32_t>(left);
}
int ferry_call_cancelled(const ferry_call_t* call) {
  return call && reinterpret_cast<const ferry::IncomingCall*>(call)->cancelled() ? 1 : 0;
}

namespace {
ferry_status_t RpcAsync(ferry_worker_t* w, const char* to, const char* function,
                        const ferry_payload_t* args, uint32_t timeout_ms,
                        ferry_future_t** out, bool caller_waits) {
  FERRY_API_GUARD({
    if (w == nullptr || to == nullptr || function == nullptr || out == nullptr) {
      DropTensors(args);
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_rpc_async: worker, to, function and out are required");
    }
    auto v = ToSentValue(args, caller_waits);
    if (!v.ok()) return Fail(v.status());
    auto* f = new ferry_future();
    f->future = w->agent->Call(to, function, std::move(v.value()), Ms(timeout_ms));
    f->agent = w->agent;
    *out = f;
    return Ok();
  })
}
}  // namespace

ferry_status_t ferry_rpc_async(ferry_worker_t* w, const char* to, const char* function,
                               const ferry_payload_t* args, uint32_t timeout_ms,
                               ferry_future_t** out) {
  return RpcAsync(w, to, function, args, timeout_ms, out, /*caller_waits=*/false);
}

ferry_status_t ferry_rpc_sync(ferry_worker_t* w, const char* to, const char* function,
                              const ferry_payload_t* args, uint32_t timeout_ms,
                              ferry_message_t** result) {
  FERRY_API_GUARD({
    if (result == nullptr) {
      DropTensors(args);
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_rpc_sync: result is required");
    }
    ferry_future_t* f = nullptr;
    ferry_status_t s =
        RpcAsync(w, to, function, args, timeout_ms, &f, /*caller_waits=*/true);
    if (s != FERRY_OK) return s;
    std::unique_ptr<ferry_future_t, void (*)(ferry_future_t*)> guard(
        f, ferry_future_release);
    // The call's own deadline ends it; the wait only needs to outlast it.
    f->future->Wait(std::chrono::steady_clock::time_point::max());
    auto v = f->future->Take();
    if (!v.ok()) return Fail(v.status());
    auto* m = new ferry_message();
    m->value = std::move(v.value());
    m->agent = w->agent;
    *result = m;
    return Ok();
  })
}

ferry_status_t ferry_remote(ferry_worker_t* w, const char* to, const char* function,
                            const ferry_payload_t* args, uint32_t timeout_ms,
                            ferry_rref_t** out) {
  FERRY_API_GUARD({
    if (w == nullptr || to == nullptr || function == nullptr || out == nullptr) {
      DropTensors(args);
      return Fail(FERRY_INVALID_ARGUMENT,
                  "ferry_remote: worker, to, function and out are required");
    }
    auto v = ToSentValue(args, /*caller_waits=*/false);
    if (!v.ok()) return Fail(v.status());
    auto h = w->agent->Remote(to, function, std::move(v.value()), Ms(timeout_ms));
    if (!h.ok()) return Fail(h.status());
    auto* r = new ferry_rref();
    r->handle = h.value();
    r->agent = w->agent;
    *out = r;
    return Ok();
  })
}

// ---- futures ----------------------------------------------------------------

ferry_status_t ferry_future_wait(ferry_future_t* f, uint32_t timeout_ms) {
  FERRY_API_GUARD({
    if (f == nullptr) return Fail(FERRY_INVALID_ARGUMENT, "future is NULL");
    const auto deadline = timeout_ms == UINT32_MAX
                              ? std::chrono::steady_clock::time_point::max()
                              : std::chrono::steady_clock::now() + Ms(timeout_ms);
    if (f->future->Wait(deadline)) return Ok();
    return Fail(FERRY_DEADLINE_EXCEEDED,
                "the call is still pending after " + std::to_string(timeout_ms) + " ms");
  })
}

int ferry_future_is_done(const ferry_future_t* f) {
  return f && f->future->done() ? 1 : 0;
}

ferry_status_t ferry_future_status(const ferry_future_t* f, const char** message) {
  if (f == nullptr) return FERRY_INVALID_ARGUMENT;
  if (!f->future->done()) {
    if (message) *message = "pending";
    return FERRY_UNAVAILABLE;
  }
  if (message) *message = f->future->status().message().c_str();
  return f->future->status().code();
}

ferry_status_t ferry_future_take(ferry_future_t* f, ferry_message_t** out) {
  FERRY_API_GUARD({
    if (f == nullptr || out == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_future_take: future and out needed");
    }
    auto v = f->future->Take();
    if (!v.ok()) return Fail(v.status());
    auto* m = new ferry_message();
    m->value = std::move(v.value());
    m->agent = f->agent;
    *out = m;
    return Ok();
  })
}

ferry_status_t ferry_future_then(ferry_future_t* f, ferry_future_fn fn, void* user_data) {
  FERRY_API_GUARD({
    if (f == nullptr || fn == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_future_then: future and fn needed");
    }
    f->future->Then([f, fn, user_data] { fn(user_data, f); });
    return Ok();
  })
}

ferry_status_t ferry_future_cancel(ferry_future_t* f) {
  FERRY_API_GUARD({
    if (f == nullptr) return Fail(FERRY_INVALID_ARGUMENT, "future is NULL");
    if (f->future->Cancel()) return Ok();
    return Fail(FERRY_FAILED_PRECONDITION, "the call had finished already");
  })
}

void ferry_future_release(ferry_future_t* f) {
  delete f;
}

// ---- RRefs ---------------------------------------------------------------------

ferry_status_t ferry_rref_create(ferry_worker_t* w, const ferry_payload_t* value,
                                 ferry_rref_t** out) {
  FERRY_API_GUARD({
    if (w == nullptr || out == nullptr) {
      DropTensors(value);
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_rref_create: worker and out needed");
    }
    auto v = ToValue(value);
    if (!v.ok()) {
      DropTensors(value);
      return Fail(v.status());
    }
    for (size_t i = 0; i < v.value().tensors.size(); ++i) {
      auto n = ferry::TensorBytes(v.value().tensors[i]->dl_tensor, i);
      if (!n.ok()) return Fail(n.status());
    }
    auto* r = new ferry_rref();
    r->handle = w->agent->CreateRRef(std::move(v.value()));
    r->agent = w->agent;
    *out = r;
    return Ok();
  })
}

int ferry_rref_is_owner(const ferry_rref_t* r) {
  return r && r->handle->is_owner() ? 1 : 0;
}
uint64_t ferry_rref_owner_id(const ferry_rref_t* r) {
  return r ? r->handle->owner() : 0;
}
int ferry_rref_confirmed_by_owner(const ferry_rref_t* r) {
  return r && r->handle->confirmed_by_owner() ? 1 : 0;
}

void ferry_rref_ids(const ferry_rref_t* r, char* rref_id, char* fork_id,
                    uint32_t capacity) {
  if (r == nullptr || capacity == 0) return;
  if (rref_id)
    std::snprintf(rref_id, capacity, "%s", r->handle->rref_id().ToString().c_str());
  if (fork_id)
    std::snprintf(fork_id, capacity, "%s", r->handle->fork_id().ToString().c_str());
}

ferry_status_t ferry_rref_to_here(ferry_rref_t* r, uint32_t timeout_ms,
                                  ferry_message_t** out) {
  FERRY_API_GUARD({
    if (r == nullptr || out == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_rref_to_here: rref and out needed");
    }
    auto f = r->agent->Fetch(r->handle, Ms(timeout_ms));
    f->Wait(std::chrono::steady_clock::time_point::max());
    auto v = f->Take();
    if (!v.ok()) return Fail(v.status());
    auto* m = new ferry_message();
    m->value = std::move(v.value());
    m->agent = r->agent;
    *out = m;
    return Ok();
  })
}

ferry_status_t ferry_rref_local_value(ferry_rref_t* r, uint32_t timeout_ms, void** bytes,
                                      uint64_t* num_bytes, DLTensor** tensors,
                                      uint32_t* num_tensors) {
  FERRY_API_GUARD({
    if (r == nullptr) return Fail(FERRY_INVALID_ARGUMENT, "rref is NULL");
    auto v = r->agent->LocalValue(*r->handle, Ms(timeout_ms));
    if (!v.ok()) return Fail(v.status());
    Value& val = *v.value();
    if (bytes) *bytes = val.bytes.empty() ? nullptr : &val.bytes[0];
    if (num_bytes) *num_bytes = val.bytes.size();
    if (num_tensors) *num_tensors = static_cast<uint32_t>(val.tensors.size());
    if (tensors) {
      for (size_t i = 0; i < val.tensors.size(); ++i) {
        tensors[i] = val.tensors[i] ? &val.tensors[i]->dl_tensor : nullptr;
      }
    }
    return Ok();
  })
}

ferry_status_t ferry_rref_set_local_value(ferry_rref_t* r, const ferry_payload_t* value) {
  FERRY_API_GUARD({
    if (r == nullptr || !r->handle->is_owner()) {
      DropTensors(value);
      return Fail(FERRY_FAILED_PRECONDITION,
                  "ferry_rref_set_local_value: only the owner can set the value");
    }
    auto v = ToValue(value);
    if (!v.ok()) {
      DropTensors(value);
      return Fail(v.status());
    }
    return Fail(r->agent->rrefs().SetOwnedValue(
        r->handle->rref_id(), std::make_shared<Value>(std::move(v.value()))));
  })
}

void ferry_rref_release(ferry_rref_t* r) {
  delete r;
}

ferry_status_t ferry_worker_get_stats(ferry_worker_t* w, ferry_worker_stats_t* out) {
  FERRY_API_GUARD({
    if (w == nullptr || out == nullptr) {
      return Fail(FERRY_INVALID_ARGUMENT, "ferry_worker_stats: worker and out needed");
    }
    auto s = w->agent->stats();
    ferry_worker_stats_t st{};
    st.struct_size = FERRY_WORKER_STATS_STRUCT_SIZE;
    st.owned_rrefs = s.rref.owned;
    st.user_rrefs = s.rref.users;
    st.pending_children = s.rref.pending_children;
    st.pending_controls = s.rref.pending_controls;
    st.pending_calls = s.pending_calls;
    st.refused_connections = s.refused_connections;
    st.device_messages = s.device_messages;
    st.staged_messages = s.staged_messages;
    st.staged_bytes = s.staged_bytes;
    const auto snap = ferry::SnapshotTotals();
    st.snapshot_tensors = snap.tensors;
    st.snapshot_bytes = snap.bytes;
    st.dropped_calls = s.dropped_calls;
    const uint32_t n = out->struct_size < st.struct_size && out->struct_size != 0
                           ? out->struct_size
                           : st.struct_size;
    std::memcpy(out, &st, n);
    out->struct_size = n;
    return Ok();
  })
}

}  // extern "C"
