/* ferry.h — the public C API of the ferry core: workers, calls, futures,
 * remote references (RRefs) and tensors.
 *
 * Version 0.2 (FERRY_API_VERSION_*). The same compatibility rules as the
 * transport ABI (docs/abi.md): structs carry struct_size first and only grow
 * at the end; a caller sets struct_size to the size it was compiled with.
 * C99; every function is thread-safe unless it says otherwise.
 *
 * Errors: functions return a ferry_status_t (codes from ferry/common.h:
 * FERRY_OK, FERRY_NOT_FOUND, FERRY_DEADLINE_EXCEEDED, FERRY_PEER_GONE, ...).
 * On failure, ferry_last_error() returns a message for the calling thread
 * that says what happened and what to do; it stays valid until the thread's
 * next ferry call.
 *
 * Ownership is written beside every pointer:
 *   - "owned: released with ferry_X_release" — the caller must release it;
 *   - "taken" — ferry takes ownership even when the call fails;
 *   - "borrowed" — valid for the call (or for the stated lifetime) only.
 * Tensors are DLPack managed tensors (DLPack 0.6 `DLManagedTensor`): a
 * tensor given to ferry is taken, and its deleter is called exactly once,
 * after its bytes left (or the call failed); ferry never writes to it.
 * A tensor ferry gives out is the caller's, released with its deleter.
 */
#ifndef FERRY_FERRY_H_
#define FERRY_FERRY_H_

#include <dlpack/dlpack.h>
#include <ferry/common.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_API_VERSION_MAJOR 0
#define FERRY_API_VERSION_MINOR 2

/* The library's version of this API; a program built against a newer minor
 * can check it at run time. */
uint32_t ferry_api_version(void); /* (major << 16) | minor */

typedef struct ferry_worker ferry_worker_t;   /* owned: ferry_worker_destroy */
typedef struct ferry_future ferry_future_t;   /* owned: ferry_future_release */
typedef struct ferry_rref ferry_rref_t;       /* owned: ferry_rref_release */
typedef struct ferry_message ferry_message_t; /* owned: ferry_message_release */
typedef struct ferry_call ferry_call_t;       /* an incoming call; answered
                                                 exactly once, see below */

/* The calling thread's last error message ("" when none). Borrowed: valid
 * until this thread's next ferry call. */
const char* ferry_last_error(void);
/* A status code's name without the prefix ("NOT_FOUND" for FERRY_NOT_FOUND),
 * "UNKNOWN_STATUS" for a code this library does not know. Static. */
const char* ferry_status_name(ferry_status_t code);

/* ------------------------------------------------------------------------ */
/* Workers and membership                                                    */
/* ------------------------------------------------------------------------ */

typedef struct ferry_worker_options {
  uint32_t struct_size; /* FERRY_WORKER_OPTIONS_STRUCT_SIZE */
  uint32_t flags;       /* FERRY_WORKER_* */
  const char* name;     /* borrowed: unique among live workers */
  const char* job;      /* borrowed: NULL = FERRY_JOB or "default" */
  /* borrowed: a plugin name ("tcp", "shm", ...), a comma list in preference
   * order, or "auto" (every plugin found; per peer the highest priority one
   * both share in one domain). NULL = FERRY_TRANSPORT or "tcp". */
  const char* transport;
  /* borrowed: the rendezvous store, "host:port". NULL = FERRY_STORE. With
   * FERRY_WORKER_HOST_STORE this worker hosts it there (port 0 = any). */
  const char* store_address;
  /* borrowed: the job secret. NULL = the contents of FERRY_SECRET_FILE, or
   * FERRY_SECRET. With none at all, every connection uses an empty secret
   * and the worker logs a warning: fine on a laptop, not on a cluster. */
  const char* secret;
  uint32_t default_timeout_ms; /* per call; 0 = 30000 */
  uint32_t peer_timeout_ms;    /* heartbeat loss => peer gone; 0 = 3000 */
  uint32_t join_timeout_ms;    /* reaching the store; 0 = 10000 */
  uint32_t executor_threads;   /* for FERRY_HANDLER_MAY_BLOCK; 0 = 4 */
  uint32_t reserved;
  /* 0.2. borrowed for the call (copied): where tensors that arrive in
   * device memory are allocated. NULL = the device transport's own
   * allocator (cuda_ipc: a pool of cuMemAlloc blocks). */
  const struct ferry_device_allocator* device_allocator;
  /* 0.2. The job's kind (docs/membership.md, "Static and elastic jobs").
   * world_size > 0: a static job of world_size workers, this one of rank
   * `rank` (0..world_size-1; a negative rank = the environment's RANK).
   * world_size 0: the environment decides: WORLD_SIZE set (as torchrun sets
   * it) = a static job of that size, this worker's rank from RANK (`rank`
   * is not read); WORLD_SIZE unset or empty, or FERRY_WORKER_ELASTIC = an
   * elastic job (`rank` not read). */
  uint32_t world_size;
  int32_t rank;
  /* A static job's start waits this long for every rank to join;
   * 0 = 300000 (5 minutes). */
  uint32_t start_timeout_ms;
  uint32_t reserved2;
  /* 0.2. borrowed for the call (copied): the worker's resource limits
   * (docs/limits.md). NULL = every limit from its environment variable,
   * else its default. */
  const struct ferry_limits* limits;
} ferry_worker_options_t;
#define FERRY_WORKER_OPTIONS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_worker_options_t, limits)

/* 0.2. What one worker lets its peers and its own callers use, so that no
 * peer can exhaust it (docs/limits.md says why each default is what it
 * is). A field 0 = the environment variable named beside it (a whole
 * number), else the default. At a limit a call either waits for room
 * within its deadline (FERRY_DEADLINE_EXCEEDED naming the limit when the
 * deadline passes first) or fails with FERRY_RESOURCE_EXHAUSTED naming the
 * limit, its value and how to raise it. */
typedef struct ferry_limits {
  uint32_t struct_size; /* FERRY_LIMITS_STRUCT_SIZE */
  /* Calls this worker has sent to one peer and not had answered; a new
   * call waits for room. FERRY_MAX_CALLS_IN_FLIGHT_PER_PEER; 0 = 4096. */
  uint32_t max_calls_in_flight_per_peer;
  /* Header plus payload of one message, either way. A larger call fails
   * before anything is sent; a peer that announces a larger one has its
   * connection closed. FERRY_MAX_MESSAGE_SIZE; 0 = 4 GiB. */
  uint64_t max_message_size;
  /* Bytes of messages to one peer not yet written to its connection; a
   * new call waits while there are this many. (One message larger than the
   * limit still goes, alone.) FERRY_MAX_QUEUED_BYTES_PER_CONNECTION;
   * 0 = 1 GiB. */
  uint64_t max_queued_bytes_per_connection;
  /* Calls that arrived here and wait for a handler thread (handlers that
   * may block, calls held for a function not registered yet); one more is
   * refused with FERRY_RESOURCE_EXHAUSTED back to its caller.
   * FERRY_MAX_QUEUED_CALLS; 0 = 65536. */
  uint32_t max_queued_calls;
  /* Open connections of this worker, either direction, the store's
   * included; an accepted one beyond it is closed at once.
   * FERRY_MAX_CONNECTIONS; 0 = 4096, or the process's open-file limit
   * less 64 when that is lower. */
  uint32_t max_connections;
  /* A connection that has not finished its authenticated handshake in
   * this time is closed. FERRY_HANDSHAKE_TIMEOUT_MS; 0 = the peer
   * timeout. */
  uint32_t handshake_timeout_ms;
  uint32_t reserved;
} ferry_limits_t;
#define FERRY_LIMITS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_limits_t, reserved)

/* An application's allocator for received device tensors. Both functions
 * may be called from any of ferry's threads, concurrently, and while ferry
 * holds its connection lock: they must not call into ferry, nor wait for a
 * lock that a thread calling ferry may hold (a Python allocator behind the
 * GIL, say). `free` gets the pointer, device and length `alloc` was asked
 * for, once the tensor's DLPack deleter ran (or the message was dropped).
 * The memory must stay usable by the CUDA primary context of `device`. */
typedef struct ferry_device_allocator {
  uint32_t struct_size; /* FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE */
  uint32_t reserved;
  void* user_data; /* passed back to both functions */
  /* Returns `length` bytes on `device`, or NULL when it cannot (the
   * message then fails with FERRY_RESOURCE_EXHAUSTED). */
  void* (*alloc)(void* user_data, ferry_device_t device, uint64_t length);
  void (*free)(void* user_data, ferry_device_t device, void* data, uint64_t length);
} ferry_device_allocator_t;
#define FERRY_DEVICE_ALLOCATOR_STRUCT_SIZE \
  FERRY_STRUCT_SIZE(ferry_device_allocator_t, free)

#define FERRY_WORKER_HOST_STORE ((uint32_t)1 << 0) /* embed the store here */
#define FERRY_WORKER_BUSY_POLL ((uint32_t)1 << 1)  /* spin, never sleep */
/* 0.2. An elastic job even when WORLD_SIZE is set (options.world_size 0). */
#define FERRY_WORKER_ELASTIC ((uint32_t)1 << 2)

/* Starts a worker and joins the job. Elastic job: never waits for other
 * workers. Static job: returns once all world_size workers have joined (a
 * worker that joined and left since counts), or fails after
 * start_timeout_ms with FERRY_DEADLINE_EXCEEDED naming the ranks missing;
 * a rank taken by another worker is FERRY_ALREADY_EXISTS, a world_size or
 * rank that does not fit the job FERRY_INVALID_ARGUMENT. */
ferry_status_t ferry_worker_start(const ferry_worker_options_t* options,
                                  ferry_worker_t** out /* owned */);
/* = ferry_worker_shutdown_ex(w, FERRY_SHUTDOWN_GRACEFUL, timeout_ms). */
ferry_status_t ferry_worker_shutdown(ferry_worker_t* w, uint32_t timeout_ms);

/* 0.2. How ferry_worker_shutdown_ex leaves. */
#define FERRY_SHUTDOWN_GRACEFUL 0u
#define FERRY_SHUTDOWN_IMMEDIATE ((uint32_t)1 << 0)
/* 0.2. timeout_ms value: no limit (a static job's barrier waits as long as
 * it takes, as torch's shutdown does; a member lost before it arrives still
 * ends it with FERRY_PEER_GONE). */
#define FERRY_NO_TIMEOUT UINT32_MAX

/* 0.2. Leaves the job (docs/membership.md, "Worker states").
 * FERRY_SHUTDOWN_GRACEFUL in a static job: first the job-wide barrier:
 * this worker's own pending calls and RRef messages finish, it tells the
 * store it reached shutdown, and it keeps serving calls until every rank
 * has; then it leaves as below. Fails with FERRY_DEADLINE_EXCEEDED when
 * timeout_ms passes first ("shutdown: worker 'w2' (rank 2) did not reach
 * shutdown within 5 s"), or FERRY_PEER_GONE as soon as a member left or was
 * lost without reaching shutdown (or the store's host was lost); the
 * worker has left either way.
 * The leave (every graceful shutdown; all of it in an elastic job): stops
 * taking calls, answers those it is running (waits at most timeout_ms for
 * them; the worker's default call timeout with FERRY_NO_TIMEOUT), fails its
 * own pending calls with FERRY_CANCELLED, releases its RRefs, tells the
 * store it leaves, and closes. An elastic worker never waits for other
 * workers' work.
 * FERRY_SHUTDOWN_IMMEDIATE: leaves at once, in any job: no barrier, no wait
 * for running calls (timeout_ms is not read); a static job's other members
 * see it leave without reaching shutdown.
 * Idempotent: a second call returns FERRY_OK at once. */
ferry_status_t ferry_worker_shutdown_ex(ferry_worker_t* w, uint32_t flags,
                                        uint32_t timeout_ms);
/* Leaves at once if not done yet (FERRY_SHUTDOWN_IMMEDIATE: never a
 * barrier) and frees the worker. Futures and RRefs still held stay valid
 * objects that report FERRY_CANCELLED. */
void ferry_worker_destroy(ferry_worker_t* w);

/* The worker's member id: assigned by the store, nonzero, stable for its
 * name; in a static job it is rank + 1. "#<id>" addresses it. */
uint64_t ferry_worker_id(const ferry_worker_t* w);
/* 0.2. Its rank in a static job (torch's WorkerInfo.id), -1 in an elastic
 * job; and the job's world_size, 0 in an elastic job. */
int32_t ferry_worker_rank(const ferry_worker_t* w);
uint32_t ferry_worker_world_size(const ferry_worker_t* w);
/* Borrowed: valid while `w` lives. */
const char* ferry_worker_name(const ferry_worker_t* w);
/* The address of the store this worker hosts or joined. Borrowed. */
const char* ferry_worker_store_address(const ferry_worker_t* w);

#define FERRY_MEMBER_ALIVE 1
#define FERRY_MEMBER_LEFT 2 /* left gracefully */
#define FERRY_MEMBER_GONE 3 /* died, or stopped answering heartbeats */

typedef struct ferry_member {
  uint32_t struct_size;
  int32_t state;         /* FERRY_MEMBER_* */
  uint64_t id;           /* stable for a name within a job */
  uint64_t incarnation;  /* grows each time the name joins again */
  const char* name;      /* borrowed: for the call / the callback */
  const char* transport; /* borrowed: plugin reaching it, "" if not yet
                            connected, "self" for this worker */
  /* 0.2. Its rank in a static job, -1 in an elastic one. */
  int32_t rank;
  uint32_t reserved;
} ferry_member_t;
#define FERRY_MEMBER_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_member_t, reserved)

/* Fills up to `capacity` members (every worker this one knows, itself
 * included, live ones first) and sets *count to how many there are.
 * The array's element size is out[0].struct_size when the caller set it to
 * FERRY_MEMBER_STRUCT_SIZE (0.2: then every element carries rank); any
 * other value is read as a 0.1 caller's array (elements end at transport).
 * Each element's struct_size is set to the size written. */
ferry_status_t ferry_worker_members(ferry_worker_t* w, ferry_member_t* out,
                                    uint32_t capacity, uint32_t* count);
/* Waits until at least `n` workers (this one included) are alive. */
ferry_status_t ferry_wait_for_workers(ferry_worker_t* w, uint32_t n, uint32_t timeout_ms);

/* Called when a member joins, leaves or is gone. Runs on a ferry thread;
 * must not block (no waits on futures). */
typedef void (*ferry_member_fn)(void* user_data, const ferry_member_t* member);
ferry_status_t ferry_on_membership(ferry_worker_t* w, ferry_member_fn fn,
                                   void* user_data);

/* ------------------------------------------------------------------------ */
/* Payloads                                                                  */
/* ------------------------------------------------------------------------ */

/* What a call carries, either way: bytes, tensors and RRefs. */
typedef struct ferry_payload {
  uint32_t struct_size; /* FERRY_PAYLOAD_STRUCT_SIZE */
  uint32_t num_tensors;
  const void* bytes; /* borrowed for the call (copied) */
  uint64_t num_bytes;
  /* taken: each tensor's deleter runs exactly once, once sent (or at once
   * when the call fails). Contiguous (strides NULL or compact), in host
   * memory or CUDA device memory: device tensors go over cuda_ipc to a
   * worker on the same host and are staged through host memory to others
   * (docs/python.md, "Device tensors"). */
  DLManagedTensor** tensors;
  /* borrowed: RRefs passed along (each becomes a new fork at the
   * receiver); the caller keeps its own handles. */
  ferry_rref_t* const* rrefs;
  uint32_t num_rrefs;
  uint32_t reserved;
  /* 0.2. Device tensors: the stream their producer wrote them on
   * (FERRY_STREAM_READY, FERRY_STREAM_LEGACY, FERRY_STREAM_PER_THREAD or a
   * CUstream). ferry reads them after the work submitted to it before the
   * call, without blocking. 0 (READY) claims the bytes are already written:
   * pass the stream unless you synchronised. A CUstream must stay valid
   * until each device tensor's deleter has run. */
  uint64_t stream;
  /* 0.2. Which host tensors are sent from their own memory (bit i: tensor
   * i; FERRY_ZERO_COPY_ALL: every one). By default (0) the bytes that
   * arrive are the bytes the tensor held when the call was made
   * (ferry_rpc_async, ferry_remote) or answered (ferry_call_reply): ferry
   * copies each host tensor into a pooled buffer before the function
   * returns and runs its deleter at once. A tensor marked here is sent
   * zero-copy instead, and the contract is: do not write it until the
   * future is done (a result: until the call's bytes left, i.e. do not
   * write it again at all unless you know the caller has it).
   * ferry_rpc_sync never copies (the caller waits for the reply, and the
   * callee replies only after every byte arrived). Device tensors are
   * never copied: see docs/api.md, "When a tensor's bytes are read". */
  uint64_t zero_copy;
} ferry_payload_t;
#define FERRY_PAYLOAD_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_payload_t, zero_copy)
#define FERRY_ZERO_COPY_ALL (~(uint64_t)0)

/* A received payload's parts. */
const void* ferry_message_bytes(const ferry_message_t* m, uint64_t* num_bytes);
uint32_t ferry_message_num_tensors(const ferry_message_t* m);
/* Owned by the caller afterwards (call its deleter); NULL if already taken
 * or out of range. */
DLManagedTensor* ferry_message_take_tensor(ferry_message_t* m, uint32_t i);
uint32_t ferry_message_num_rrefs(const ferry_message_t* m);
/* Owned afterwards (ferry_rref_release); NULL if taken or out of range. */
ferry_rref_t* ferry_message_take_rref(ferry_message_t* m, uint32_t i);
void ferry_message_release(ferry_message_t* m); /* untaken parts freed */

/* ------------------------------------------------------------------------ */
/* Functions and calls                                                       */
/* ------------------------------------------------------------------------ */

/* A registered function. `args` is borrowed for the handler's run (take
 * tensors and RRefs out of it to keep them). The handler answers `call`
 * exactly once, with ferry_call_reply or ferry_call_fail, before returning
 * or later from any thread (asynchronous execution). */
typedef void (*ferry_handler_fn)(void* user_data, ferry_call_t* call,
                                 ferry_message_t* args);

/* The handler may block (wait on futures, sleep, do I/O): it runs on the
 * worker's executor threads. Without it, it runs on the thread that
 * received the call, which is the fastest path and must not block. */
#define FERRY_HANDLER_MAY_BLOCK ((uint32_t)1 << 0)

ferry_status_t ferry_register(ferry_worker_t* w, const char* name, ferry_handler_fn fn,
                              void* user_data, uint32_t flags);

/* Answer a call. `result` may be NULL (empty). Returns FERRY_FAILED_PRECONDITION
 * if the call was answered already. Either frees `call`. */
ferry_status_t ferry_call_reply(ferry_call_t* call, const ferry_payload_t* result);
ferry_status_t ferry_call_fail(ferry_call_t* call, ferry_status_t code,
                               const char* message);
/* The caller's member id and name (borrowed, until the call is answered). */
uint64_t ferry_call_caller_id(const ferry_call_t* call);
const char* ferry_call_caller_name(const ferry_call_t* call);
/* 0.2. Deadlines and cancellation (docs/api.md). The function called
 * (borrowed, until the call is answered). The caller's deadline travels
 * with the call: the milliseconds left of it (0 once passed; UINT32_MAX
 * when the caller set none). ferry_call_cancelled is 1 once the caller gave
 * up on the call: it cancelled it (ferry_future_cancel), its deadline
 * passed, or it died or left; nobody reads the answer then, so a handler
 * may stop early (it still answers, to free the call). A call made by a
 * handler while it runs, with timeout_ms 0, gets what is left of the
 * deadline of the call being served instead of the default. */
const char* ferry_call_function(const ferry_call_t* call);
uint32_t ferry_call_remaining_ms(const ferry_call_t* call);
int ferry_call_cancelled(const ferry_call_t* call);

/* Target a worker by name ("worker1") or by id ("#3"). In an elastic job
 * a name not known yet is waited for within the call's timeout (a worker
 * may join late); in a static job every member joined before start
 * returned, so an unknown name fails at once with FERRY_NOT_FOUND, which
 * lists the job's members. timeout_ms 0 = the worker's default. */
ferry_status_t ferry_rpc_async(ferry_worker_t* w, const char* to, const char* function,
                               const ferry_payload_t* args, uint32_t timeout_ms,
                               ferry_future_t** out);
/* rpc_async + wait. On success *result is owned by the caller. On a remote
 * failure the status and message are the remote ones. */
ferry_status_t ferry_rpc_sync(ferry_worker_t* w, const char* to, const char* function,
                              const ferry_payload_t* args, uint32_t timeout_ms,
                              ferry_message_t** result);
/* Runs `function` on `to` and keeps its result there; returns at once with
 * a UserRRef (owner `to`). The function's failure surfaces in to_here. */
ferry_status_t ferry_remote(ferry_worker_t* w, const char* to, const char* function,
                            const ferry_payload_t* args, uint32_t timeout_ms,
                            ferry_rref_t** out);

/* ------------------------------------------------------------------------ */
/* Futures                                                                   */
/* ------------------------------------------------------------------------ */

/* FERRY_OK once done, FERRY_DEADLINE_EXCEEDED if still pending after
 * timeout_ms (UINT32_MAX = no limit). While it waits, this thread drives
 * the worker's progress itself. */
ferry_status_t ferry_future_wait(ferry_future_t* f, uint32_t timeout_ms);
int ferry_future_is_done(const ferry_future_t* f);
/* The outcome: FERRY_UNAVAILABLE... while pending. *message borrowed (valid
 * while f lives), may be NULL. */
ferry_status_t ferry_future_status(const ferry_future_t* f, const char** message);
/* The value, once done and OK; owned afterwards. FERRY_FAILED_PRECONDITION
 * if pending, failed, or taken already. */
ferry_status_t ferry_future_take(ferry_future_t* f, ferry_message_t** out);
/* Runs fn once the future is done (at once, on this thread, if it is),
 * else on the thread that completes it: must not block. `f` must not be
 * released before fn has run (fn receives it). A waiter may see the future
 * done just before its continuations have run. */
typedef void (*ferry_future_fn)(void* user_data, ferry_future_t* f);
ferry_status_t ferry_future_then(ferry_future_t* f, ferry_future_fn fn, void* user_data);
/* 0.2. Gives up on the call: the future completes with FERRY_CANCELLED and
 * the callee is told (a call still queued there is not run; a running
 * handler sees ferry_call_cancelled). FERRY_FAILED_PRECONDITION when the
 * future was done already. */
ferry_status_t ferry_future_cancel(ferry_future_t* f);
void ferry_future_release(ferry_future_t* f);

/* ------------------------------------------------------------------------ */
/* RRefs (docs/protocol.md)                                                  */
/* ------------------------------------------------------------------------ */

/* A local value wrapped as an OwnerRRef on this worker (torch's RRef(x)). */
ferry_status_t ferry_rref_create(ferry_worker_t* w, const ferry_payload_t* value,
                                 ferry_rref_t** out);
int ferry_rref_is_owner(const ferry_rref_t* r);
uint64_t ferry_rref_owner_id(const ferry_rref_t* r);
/* 1 when the owner knows of this fork: always on the owner; on a user once
 * the owner acknowledged it (torch's confirmed_by_owner). Since 0.1. */
int ferry_rref_confirmed_by_owner(const ferry_rref_t* r);
/* The RRefId and ForkId as "worker:counter" strings, for logs. */
void ferry_rref_ids(const ferry_rref_t* r, char* rref_id, char* fork_id,
                    uint32_t capacity);
/* A copy of the value, fetched from the owner. */
ferry_status_t ferry_rref_to_here(ferry_rref_t* r, uint32_t timeout_ms,
                                  ferry_message_t** out);
/* Owner only: the value in place. *bytes points at the owner's bytes,
 * writable in place (borrowed while the RRef lives); the tensors' data can
 * be written in place too. FERRY_FAILED_PRECONDITION on a user. Waits up to
 * timeout_ms for a remote() result still being computed. */
ferry_status_t ferry_rref_local_value(ferry_rref_t* r, uint32_t timeout_ms, void** bytes,
                                      uint64_t* num_bytes, DLTensor** tensors,
                                      uint32_t* num_tensors);
/* Owner only: replaces the value. */
ferry_status_t ferry_rref_set_local_value(ferry_rref_t* r, const ferry_payload_t* value);
void ferry_rref_release(ferry_rref_t* r);

/* ------------------------------------------------------------------------ */
/* Introspection (tests, monitoring)                                         */
/* ------------------------------------------------------------------------ */

typedef struct ferry_worker_stats {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t owned_rrefs;         /* OwnerRRefs alive here */
  uint64_t user_rrefs;          /* UserRRefs alive here (incl. awaiting delete) */
  uint64_t pending_children;    /* forks sent, not yet confirmed (G2) */
  uint64_t pending_controls;    /* RRef control messages not yet acknowledged */
  uint64_t pending_calls;       /* calls sent, not answered */
  uint64_t refused_connections; /* bad secret, wrong job, ... */
  /* 0.2. Messages with device tensors sent over a device transport
   * (cuda_ipc); those staged through host memory for a peer no device
   * transport reaches, and the device bytes they copied. */
  uint64_t device_messages;
  uint64_t staged_messages;
  uint64_t staged_bytes;
  /* 0.2. Calls served here that were dropped before they ran because
   * their caller had given up (cancelled, past its deadline, gone). */
  uint64_t dropped_calls;
  /* 0.2. Host tensors this process copied to send them as they were at
   * the call or the reply (ferry_payload_t.zero_copy), and their bytes. */
  uint64_t snapshot_tensors;
  uint64_t snapshot_bytes;
} ferry_worker_stats_t;
#define FERRY_WORKER_STATS_STRUCT_SIZE \
  FERRY_STRUCT_SIZE(ferry_worker_stats_t, snapshot_bytes)
ferry_status_t ferry_worker_get_stats(ferry_worker_t* w, ferry_worker_stats_t* out);

/* ------------------------------------------------------------------------ */
/* Plugin inventory (what `ferry info` shows)                                */
/* ------------------------------------------------------------------------ */

/* Which transport plugins this process finds, what each offers, whether it
 * can run here and, if not, why; every load attempt that failed; and where
 * it looked. It loads plugins with the loader and settings a worker uses
 * (FERRY_PLUGIN_PATH, FERRY_TRANSPORTS, the directories beside libferry),
 * so it answers "what would a worker started here see".
 *
 * Typed structs rather than one JSON string: a C caller reads fields
 * without a parser, each field says what it means and how long it lives,
 * and the structs grow by struct_size like the rest of this API. Every
 * string and array an inventory hands out is borrowed from it: valid until
 * ferry_inventory_release. The bit sets (features, caps, memory_kinds) hold
 * the FERRY_FEATURE_*, FERRY_CAP_* and FERRY_MEM_* bits of ferry/transport.h;
 * the names of the caps and memory kinds come beside them (a caller that
 * reads those needs no other header; the feature bits are transport.h's).
 * A struct filled here follows the struct_size rule: the caller sets
 * struct_size to the size it was compiled with (FERRY_*_STRUCT_SIZE); ferry
 * writes only the fields inside it and sets struct_size to the smaller of
 * both sizes (FERRY_INVALID_ARGUMENT when it is too small to hold even the
 * first fields). An index past the end is FERRY_OUT_OF_RANGE. */
typedef struct ferry_inventory ferry_inventory_t; /* owned:
                                                     ferry_inventory_release */

/* An inventory with nothing loaded yet; the search settings are read from
 * the environment now. */
ferry_status_t ferry_inventory_create(ferry_inventory_t** out /* owned */);
/* Loads one plugin by name ("tcp") or by path ("./libferry-foo.so") and
 * sets *index (may be NULL) to its place in the inventory; a file loaded
 * again keeps its first place. On failure no plugin is added, the failed
 * loads may grow (when a file was tried), and ferry_last_error() says why
 * and what to do: FERRY_NOT_FOUND names the paths tried and the closest
 * plugin name. */
ferry_status_t ferry_inventory_load(ferry_inventory_t* inv,
                                    const char* name_or_path /* borrowed */,
                                    uint32_t* index /* out */);
/* Loads every plugin on the search path that FERRY_TRANSPORTS admits (the
 * first file of each name wins, like PATH). A plugin that fails to load is a
 * failed load, not a failure of this call. */
ferry_status_t ferry_inventory_load_all(ferry_inventory_t* inv);
void ferry_inventory_release(ferry_inventory_t* inv);

/* Where the inventory looks for plugins. */
typedef struct ferry_inventory_search {
  uint32_t struct_size; /* FERRY_INVENTORY_SEARCH_STRUCT_SIZE */
  uint32_t num_dirs;
  const char* const* dirs; /* num_dirs directories, searched in order */
  const char* filter;      /* FERRY_TRANSPORTS ("" when unset) */
  /* The transport ABI window the host offers a plugin. */
  uint32_t abi_major;
  uint32_t abi_minor_min;
  uint32_t abi_minor_max;
  uint32_t reserved;
} ferry_inventory_search_t;
#define FERRY_INVENTORY_SEARCH_STRUCT_SIZE \
  FERRY_STRUCT_SIZE(ferry_inventory_search_t, reserved)

ferry_status_t ferry_inventory_get_search(const ferry_inventory_t* inv,
                                          ferry_inventory_search_t* out);

/* One loaded plugin. */
typedef struct ferry_plugin_info {
  uint32_t struct_size; /* FERRY_PLUGIN_INFO_STRUCT_SIZE */
  int32_t usable;       /* 1: a context opens here; 0: see
                           unusable_reason */
  const char* name;     /* "tcp" */
  const char* version;  /* the plugin's own version ("" if none) */
  const char* path;     /* the file loaded */
  /* Transport ABI: the major, the minor negotiated, and the window of
   * minors the plugin supports. */
  uint32_t abi_major;
  uint32_t abi_minor;
  uint32_t plugin_minor_min;
  uint32_t plugin_minor_max;
  uint64_t features;           /* FERRY_FEATURE_* bits */
  const char* unusable_reason; /* why no context opens here ("" if usable):
                                  "UNAVAILABLE: ..." */
  /* The rest is what a context said about itself; 0, "" or empty when the
   * plugin is not usable. */
  uint64_t caps;         /* FERRY_CAP_* bits */
  uint64_t memory_kinds; /* FERRY_MEM_* bits */
  /* The names of the bits set in caps ("wakeup_fd", "ordered", ...) and in
   * memory_kinds ("host", "cuda", ...); a bit this library has no name for
   * reads "bit<N>". */
  const char* const* capability_names;
  const char* const* memory_kind_names;
  uint32_t num_capability_names;
  uint32_t num_memory_kind_names;
  uint64_t max_message_size; /* header + all segments, bytes */
  uint64_t max_inline_size;  /* segments up to this size may arrive inline */
  uint32_t max_header_size;
  uint32_t max_segments; /* segments per message */
  int32_t priority;      /* routing preference: higher wins */
  uint32_t reserved;
  /* Who the context can reach; "" means every host (as for tcp). */
  const char* domain;
  const char* description; /* one line: provider, mode, limits */
  /* 0.2. What the loader noticed about a plugin it loaded ("" if nothing):
   * e.g. a file named for another name than the plugin declares. */
  const char* warning;
} ferry_plugin_info_t;
#define FERRY_PLUGIN_INFO_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_plugin_info_t, warning)

/* The loaded plugins, in the order they were loaded. The first query of a
 * plugin opens one context of it (and closes it again) to learn whether it
 * can run here and what it offers; later queries repeat that answer. */
uint32_t ferry_inventory_num_plugins(const ferry_inventory_t* inv);
ferry_status_t ferry_inventory_plugin(ferry_inventory_t* inv, uint32_t i,
                                      ferry_plugin_info_t* out);

/* One load attempt that failed. */
typedef struct ferry_load_failure {
  uint32_t struct_size; /* FERRY_LOAD_FAILURE_STRUCT_SIZE */
  uint32_t reserved;
  const char* path;   /* the file tried */
  const char* name;   /* the plugin's name, "" if it never said */
  const char* reason; /* what went wrong and what to do */
} ferry_load_failure_t;
#define FERRY_LOAD_FAILURE_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_load_failure_t, reason)

/* The failed load attempts, in the order they were made. */
uint32_t ferry_inventory_num_failures(const ferry_inventory_t* inv);
ferry_status_t ferry_inventory_failure(const ferry_inventory_t* inv, uint32_t i,
                                       ferry_load_failure_t* out);

/* 0.2. The plugin files ferry_inventory_load_all found and left out because
 * FERRY_TRANSPORTS excludes their names (not failures: `reason` names the
 * filter), in the order found. */
uint32_t ferry_inventory_num_filtered(const ferry_inventory_t* inv);
ferry_status_t ferry_inventory_filtered(const ferry_inventory_t* inv, uint32_t i,
                                        ferry_load_failure_t* out);

/* ------------------------------------------------------------------------ */
/* Debugging a job that hangs (docs/debugging.md)                            */
/* ------------------------------------------------------------------------ */

/* 0.2. What worker `w` is doing, as JSON text (UTF-8, NUL-terminated): its
 * identity; the calls it waits for (callee, function, age, deadline, and
 * the served call a nested call was made from); the calls it serves
 * (caller, function, queued or running and for how long); the RRefs it
 * owns (with their users and pending forks) and holds; its peers (state,
 * transport, last heard) and transports; in a static job, the start's and
 * the shutdown barrier's state; and "blocked_on", a list of sentences
 * ("the shutdown barrier waits for 'w2' (rank 2)", "handler 'f' (called by
 * 'w0') waits on its call to w3.g ..."). docs/debugging.md describes every
 * field. Works at any time, also after shutdown; takes no lock for long.
 * `len` (required) is set to the text's length without the NUL. When `cap`
 * is at least that length + 1 the text is written to `buf` (borrowed, `cap`
 * bytes); otherwise nothing is written and FERRY_RESOURCE_EXHAUSTED is
 * returned: call again with a larger buffer (the dump may have grown
 * meanwhile; `buf` may be NULL with `cap` 0 to ask for the length). The
 * same dump goes to the log when a shutdown or a wait passes its timeout,
 * and to stderr (and FERRY_DEBUG_DIR) on the debug-dump signal, SIGUSR1 by
 * default (FERRY_DEBUG_SIGNAL; docs/debugging.md). */
ferry_status_t ferry_worker_debug_dump(ferry_worker_t* w, char* buf, uint64_t cap,
                                       uint64_t* len);

/* 0.2. The debug dump of worker `worker` (its name; NULL or "" = the
 * worker hosting the store) of a running job, from any process, which
 * does not join the job (`ferry debug dump`). It
 * connects to the job's store at `store_address` ("host:port"; NULL =
 * FERRY_STORE) as a store client does, authenticated with the job's secret
 * both ways (`secret`; NULL = FERRY_SECRET_FILE's contents or
 * FERRY_SECRET), and asks; the worker hosting the store answers with its
 * own dump or asks `worker` over the job's own connections. `job`: NULL =
 * FERRY_JOB or "default". No secret at all is FERRY_PERMISSION_DENIED, here
 * and at the worker (a job without a secret does not serve its dumps); a
 * wrong one is refused in the handshake (FERRY_UNAUTHENTICATED or
 * FERRY_PERMISSION_DENIED). FERRY_NOT_FOUND names the job's workers when
 * none is called `worker`. Waits at most timeout_ms (0 = 10000). The
 * buffer contract is ferry_worker_debug_dump's (each call asks again). */
ferry_status_t ferry_debug_dump_remote(const char* store_address, const char* job,
                                       const char* worker, const char* secret,
                                       uint32_t timeout_ms, char* buf, uint64_t cap,
                                       uint64_t* len);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_FERRY_H_ */
