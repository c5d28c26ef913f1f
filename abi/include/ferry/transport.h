/*
 * ferry/transport.h — the transport plugin C ABI.
 *
 * A transport plugin is a shared library that exports exactly one symbol,
 * FERRY_TRANSPORT_ENTRY_SYMBOL, of type ferry_transport_negotiate_fn. The
 * ferry core (the "host") calls it once, offering an ABI major version, a
 * range of minor versions and a table of host services; the plugin answers
 * with the minor it chose, its name, version string, feature bits and a
 * static vtable. Everything else goes through that vtable.
 *
 * This header is plain C99 and the only one a plugin author includes. What
 * it shares with the core's public API (ferry/ferry.h) lives in
 * ferry/common.h, which it includes: the struct-size macros, status codes,
 * devices and log levels. It is designed for every transport
 * of the product: TCP, shared memory, libfabric RDM with RMA, and CUDA IPC.
 *
 * Rules (docs/abi.md states them in full, with the compatibility policy):
 *  - Every struct that crosses the boundary starts with `struct_size`, set by
 *    whoever fills the struct, to sizeof() of the struct as *they* compiled it.
 *    A reader accepts sizes larger than its own, reads only fields that lie
 *    inside the given size (FERRY_FIELD_PRESENT), and treats missing fields as
 *    zero. A writer writes only inside the smaller of both sizes.
 *  - Arrays of structs are strided by an explicit element size given next to
 *    the array (never by the reader's sizeof).
 *  - The host calls a vtable entry only if it is present: inside the vtable's
 *    struct_size and non-NULL. A missing entry means "unsupported".
 *  - No enums and no bool inside structs: fixed-width integers only.
 *  - Non-blocking and completion-based. Every posted operation completes
 *    exactly once, through an event returned by progress(), never inline
 *    inside the call that posted it. A call that refuses to post (returns a
 *    status other than FERRY_OK) posted nothing and produces no event.
 *  - The host drives progress. Plugin threads, if any, may only queue events
 *    for progress() to return; they never call into the host except for the
 *    thread-safe log service.
 *  - C++ exceptions never cross this boundary in either direction.
 *  - Ownership is written beside every field: "borrowed" means the callee may
 *    read it only for the duration stated and never frees it; "owned by X"
 *    means X frees it.
 *  - Edge cases are settled where they arise, in notes marked "Edge:";
 *    docs/writing-a-plugin.md ("Edge cases") lists them all with the
 *    conformance requirement (EDGE-n and others) that tests each.
 *  - user_data values (of connect, listen, send, place, and a connection's)
 *    are opaque to the plugin: returned as given, never dereferenced, never
 *    used as a key (two operations may carry the same value, NULL included).
 */
#ifndef FERRY_TRANSPORT_H_
#define FERRY_TRANSPORT_H_

#include <ferry/common.h>

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Versioning                                                                */
/* ------------------------------------------------------------------------ */

/* The ABI version this header describes. A change of major is incompatible;
 * a new minor only appends fields and vtable entries (see abi/CHANGELOG.md).
 * The ABI stays 0.x until tcp, shm, fabric and the C example plugin all pass
 * conformance; within 0.x the host still accepts a window of minors. */
#define FERRY_TRANSPORT_ABI_MAJOR 0
#define FERRY_TRANSPORT_ABI_MINOR 2

/* The one symbol a plugin exports. */
#define FERRY_TRANSPORT_ENTRY_SYMBOL "ferry_transport_negotiate"

/* ------------------------------------------------------------------------ */
/* Memory kinds                                                              */
/* ------------------------------------------------------------------------ */

/* Memory kinds a context can move, as a bit set, for routing: the core sends
 * a message over a transport only if every segment's kind is in its set. */
#define FERRY_MEM_HOST ((uint64_t)1 << 0) /* CPU and CUDA host */
#define FERRY_MEM_CUDA ((uint64_t)1 << 1)
#define FERRY_MEM_ROCM ((uint64_t)1 << 2)
#define FERRY_MEM_CUDA_MANAGED ((uint64_t)1 << 3)

/* ------------------------------------------------------------------------ */
/* Opaque handles (all owned by the plugin unless stated otherwise)          */
/* ------------------------------------------------------------------------ */

typedef struct ferry_context ferry_context_t;   /* one plugin instance */
typedef struct ferry_listener ferry_listener_t; /* accepts connections */
typedef struct ferry_conn ferry_conn_t;         /* one reliable connection */
typedef struct ferry_mr ferry_mr_t;             /* a memory registration */

/* ------------------------------------------------------------------------ */
/* Host services                                                             */
/* ------------------------------------------------------------------------ */

/* Offered by the host at negotiation. The struct and everything it points to
 * stay valid until the process exits (the host never unloads a plugin whose
 * negotiation succeeded, unless the user asked it to). */
typedef struct ferry_host_services {
  uint32_t struct_size;
  /* Messages at a level (FERRY_LOG_*) above this are dropped by the host:
   * a plugin may skip formatting them. Read it at each use; the host may
   * change it. */
  int32_t log_level;
  void* host_ctx; /* borrowed: pass back to every service below */
  /* Thread-safe. `plugin` and `message` are borrowed for the call. */
  void (*log)(void* host_ctx, int32_t level, const char* plugin, const char* message);
  /* Looks up the plugin parameter `key` (e.g. "busy_poll") for `plugin`
   * (e.g. "tcp"). The host takes it from its in-process settings, then from
   * the environment variable FERRY_<PLUGIN>_<KEY> (upper case). Copies at
   * most buf_len bytes including a terminating NUL into `buf` (caller-owned)
   * and returns the value's length, or -1 when the parameter is unset. */
  int64_t (*get_param)(void* host_ctx, const char* plugin, const char* key, char* buf,
                       uint64_t buf_len);
} ferry_host_services_t;
#define FERRY_HOST_SERVICES_STRUCT_SIZE \
  FERRY_STRUCT_SIZE(ferry_host_services_t, get_param)

/* A caller-owned buffer that a control-path call fills with a NUL-terminated
 * message when it fails. May be NULL (the callee then says nothing). */
typedef struct ferry_error_buf {
  uint32_t struct_size;
  uint32_t reserved;
  char* data;        /* borrowed for the call: written by the callee */
  uint64_t capacity; /* bytes available at `data`, including the NUL */
} ferry_error_buf_t;
#define FERRY_ERROR_BUF_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_error_buf_t, capacity)

/* ------------------------------------------------------------------------ */
/* Capabilities (per context: query() reports them)                          */
/* ------------------------------------------------------------------------ */

/* wakeup_fd is a pollable fd: readable (level-triggered) whenever progress()
 * has events to return or work to do, and not readable once progress() has
 * returned everything and nothing new happened (so the host can sleep on it;
 * in busy-poll mode a plugin may keep it readable, since the host spins). Without it the
 * host polls progress() with back-off (libfabric's shm provider has no wait object). */
#define FERRY_CAP_WAKEUP_FD ((uint64_t)1 << 0)
/* The plugin detects a peer's death by itself (EOF, reset, completion error)
 * and fails every pending operation with FERRY_PEER_GONE. While the host
 * holds an arrival unanswered, a stream plugin may report the death only
 * once the arrival is answered. Without this capability, only the core's
 * heartbeats notice a dead peer. */
#define FERRY_CAP_DETECTS_PEER_DEATH ((uint64_t)1 << 1)
/* Messages on one connection arrive in the order they were sent. */
#define FERRY_CAP_ORDERED ((uint64_t)1 << 2)
/* send/place/discard/close/reg/dereg may be called from several threads at
 * once and concurrently with progress(); progress() itself is still called by
 * one thread at a time. Without it, the host serialises every call. */
#define FERRY_CAP_THREAD_SAFE ((uint64_t)1 << 3)
/* reg/dereg are offered and registered segments are faster. */
#define FERRY_CAP_REGISTRATION ((uint64_t)1 << 4)
/* Segments in non-host memory must carry a registration handle. */
#define FERRY_CAP_DEVICE_REG_REQUIRED ((uint64_t)1 << 5)
/* The context runs in busy-poll mode (init flag or parameter): progress()
 * never sleeps in the kernel and the host should spin rather than sleep. */
#define FERRY_CAP_BUSY_POLL ((uint64_t)1 << 6)
/* Placed segments land in the destination with no intermediate copy on the
 * receive side (RMA get, CMA, CUDA IPC). Informational. */
#define FERRY_CAP_ZERO_COPY_RECV ((uint64_t)1 << 7)

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

#define FERRY_INIT_BUSY_POLL ((uint32_t)1 << 0)

typedef struct ferry_init_args {
  uint32_t struct_size;
  uint32_t flags;       /* FERRY_INIT_* bits */
  const char* instance; /* borrowed for the call: a label for logs, may be
                           NULL */
  void* ext;            /* reserved for extensions: NULL */
} ferry_init_args_t;
#define FERRY_INIT_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_init_args_t, ext)

/* What a context is and can do. Filled by query(): the host sets struct_size
 * to its sizeof; the plugin writes only fields inside it and sets struct_size
 * to the smaller of both sizes (so the host knows which fields were written).
 * The strings are owned by the context and live until fini(). */
typedef struct ferry_context_info {
  uint32_t struct_size;
  uint32_t max_header_size;  /* largest header a send may carry (>= 64) */
  uint64_t caps;             /* FERRY_CAP_* */
  uint64_t memory_kinds;     /* FERRY_MEM_* this context moves */
  uint64_t max_message_size; /* header + all segments, bytes */
  uint64_t max_inline_size;  /* segments up to this size may arrive inline;
                                Edge: a longer one never does */
  uint32_t max_segments;     /* segments per message. Edge: exactly this many
                                is a valid message; one more is refused */
  int32_t wakeup_fd;         /* -1 without FERRY_CAP_WAKEUP_FD; owned by the
                                context: never close or read it. The same fd
                                for the context's life; the plugin clears it
                                inside progress(), the host only polls it */
  int32_t priority;          /* routing preference: higher wins when two
                                transports reach a peer (tcp 10, shm 50) */
  int32_t reserved;
  /* Who this context can reach. Two contexts of the same plugin can talk iff
   * their domains are equal, or either is empty ("reachable from anywhere",
   * as for TCP). shm: "host=<boot id>;ipc=<ipc namespace>". */
  const char* domain;
  /* One line for `ferry info`: provider, mode, limits. */
  const char* description;
} ferry_context_info_t;
#define FERRY_CONTEXT_INFO_STRUCT_SIZE \
  FERRY_STRUCT_SIZE(ferry_context_info_t, description)

/* ------------------------------------------------------------------------ */
/* Events                                                                    */
/* ------------------------------------------------------------------------ */

/* Completion of connect(): `conn` is the handle connect() returned,
 * `user_data` the value given to connect(). status OK, or UNAVAILABLE when
 * nothing listens at the address or it is unreachable (the message names
 * the address), or another failure.
 * Edge: a failed CONNECTED is the connection's one failure report: no
 * CONN_BROKEN follows; sends posted before it complete with its status;
 * send() afterwards answers FERRY_FAILED_PRECONDITION (never UNAVAILABLE,
 * which would mean "retry"); the host still close()s it. */
#define FERRY_EV_CONNECTED 1
/* A new inbound connection on a listener. `conn` is new, owned by the plugin
 * until the host close()s it; `user_data` is the listener's user_data. The
 * host adopts it with set_conn_user_data() (optional) or close()s it. No
 * ARRIVAL for a connection is returned before its ACCEPTED (or CONNECTED)
 * event has been returned.
 * Edge: an ACCEPTED the plugin queued before close_listener() returned may
 * still be returned after it; the host adopts or closes that connection
 * like any other. */
#define FERRY_EV_ACCEPTED 2
/* Completion of send(): `user_data` is the send's user_data. OK means the
 * plugin no longer reads the segments' bytes (not that the peer has them).
 * Edge: completions on one connection may be returned in any order; only
 * arrivals are ordered, and only with FERRY_CAP_ORDERED. Nothing is ordered
 * across connections. */
#define FERRY_EV_SEND_DONE 3
/* A message arrived on `conn`. The fields `msg_id`, `header*`, `segments*`
 * describe it. The host must answer exactly once with place() or discard().
 * Until it does, the plugin may hold back later arrivals on the same
 * connection (and should, for FERRY_CAP_ORDERED).
 * Edge: a message with no header and no segments is a message and arrives
 * (header may then be NULL, and segments NULL when num_segments is 0).
 * msg_id is unique among the connection's unanswered arrivals; it may be
 * reused once an arrival is answered. */
#define FERRY_EV_ARRIVAL 4
/* Completion of place(): every placed segment is in its destination. */
#define FERRY_EV_PLACE_DONE 5
/* The connection failed (peer closed, died, or reset): status is
 * FERRY_PEER_GONE or another error. Every operation pending on it has
 * completed (or will complete, before FERRY_EV_CLOSED) with that status.
 * Delivered at most once per connection, and only for one that was
 * established (CONNECTED OK or ACCEPTED); the host still close()s it.
 * Edge: the failed completions may come before or after it. */
#define FERRY_EV_CONN_BROKEN 6
/* The last event for `conn`, after the host's close(): every operation on it
 * has completed. The handle is invalid once this event is returned. After
 * close(), no further ARRIVAL is returned for the connection (one the host
 * has not seen yet is dropped; one it holds is released), and a CONNECTED
 * the host has not seen yet completes with FERRY_CANCELLED. Nothing is
 * returned for the connection after CLOSED. */
#define FERRY_EV_CLOSED 7

/* A segment of an arriving message, as the receiver sees it. */
typedef struct ferry_arrival_segment {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t length;       /* bytes */
  ferry_device_t device; /* where the sender's bytes live (a hint) */
  /* Non-NULL when the bytes are already here ("inline", eager). Borrowed:
   * valid until the host answers the arrival with place() or discard().
   * Edge: never set for a segment longer than max_inline_size; for a
   * zero-length segment it may be NULL or not (its destination is ignored
   * either way). */
  const void* inline_data;
} ferry_arrival_segment_t;
#define FERRY_ARRIVAL_SEGMENT_STRUCT_SIZE \
  FERRY_STRUCT_SIZE(ferry_arrival_segment_t, inline_data)

typedef struct ferry_event {
  uint32_t struct_size;
  int32_t type;          /* FERRY_EV_* */
  ferry_status_t status; /* FERRY_OK or the failure */
  uint32_t num_segments; /* ARRIVAL: number of payload segments */
  ferry_conn_t* conn;    /* the connection concerned (NULL for none) */
  void* user_data;       /* see each FERRY_EV_* */
  void* conn_user_data;  /* the value of set_conn_user_data() / connect()'s
                            user_data for `conn` when the event is returned
                            by progress(), NULL if never set */
  /* Non-empty when status != FERRY_OK. Owned by the plugin, valid until the
   * next progress() call on the same context. */
  const char* message;
  uint64_t msg_id; /* ARRIVAL: names the message for place/discard */
  /* ARRIVAL: the message header, borrowed until place()/discard(). */
  const void* header;
  uint64_t header_len;
  /* ARRIVAL: `num_segments` descriptors, strided by `segment_stride` bytes.
   * Borrowed until place()/discard(). */
  const ferry_arrival_segment_t* segments;
  uint64_t segment_stride;
} ferry_event_t;
#define FERRY_EVENT_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_event_t, segment_stride)

/* Element i of an array of structs strided by `stride` bytes. */
#define FERRY_ELEMENT_AT(type, base, stride, i) \
  ((type*)((char*)(base) + (size_t)(stride) * (size_t)(i)))

typedef struct ferry_progress_args {
  uint32_t struct_size;
  uint32_t max_events;   /* capacity of `events`; 0 is allowed (progress
                            is made, no event is returned). Edge: then
                            `events` may be NULL, num_events is set to 0,
                            and what is ready stays queued for a later
                            call. */
  ferry_event_t* events; /* out: borrowed for the call, host-owned array */
  uint64_t event_stride; /* bytes between events: the host's sizeof. The
                            plugin writes min(stride, its own size) bytes of
                            each event and sets each event's struct_size to
                            that same smaller size. */
  uint32_t num_events;   /* out: events written */
  uint32_t reserved;
} ferry_progress_args_t;
#define FERRY_PROGRESS_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_progress_args_t, reserved)

/* ------------------------------------------------------------------------ */
/* Connections and messages                                                  */
/* ------------------------------------------------------------------------ */

typedef struct ferry_listen_args {
  uint32_t struct_size;
  uint32_t reserved;
  /* Borrowed for the call. Plugin-defined; "" means "any suitable local
   * address, port chosen by the system". tcp: "127.0.0.1:0", "[::1]:5000". */
  const char* address;
  void* user_data; /* returned in FERRY_EV_ACCEPTED; opaque */
} ferry_listen_args_t;
#define FERRY_LISTEN_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_listen_args_t, user_data)

typedef struct ferry_connect_args {
  uint32_t struct_size;
  uint32_t reserved;
  const char* address; /* borrowed for the call: a listener's address */
  void* user_data;     /* returned in FERRY_EV_CONNECTED and as the conn's
                          conn_user_data */
} ferry_connect_args_t;
#define FERRY_CONNECT_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_connect_args_t, user_data)

/* A payload segment to send. */
typedef struct ferry_segment {
  uint32_t struct_size;
  uint32_t reserved;
  const void* data; /* borrowed until FERRY_EV_SEND_DONE: not written.
                       Edge: may be NULL when length is 0 */
  uint64_t length;
  ferry_device_t device;
  ferry_mr_t* mr; /* optional registration covering data, or NULL;
                     owned by the host */
  /* 0.2. Device segments: the stream (a CUstream for CUDA) on which the
   * producer's writes to `data` were submitted, with DLPack's conventions:
   * FERRY_STREAM_READY (the bytes are ready now), FERRY_STREAM_LEGACY,
   * FERRY_STREAM_PER_THREAD, or a stream handle. The plugin orders its
   * read after the work submitted to that stream before send() was called,
   * without blocking the host (an event, not a synchronisation). Ignored
   * for host memory. */
  uint64_t stream;
} ferry_segment_t;
#define FERRY_SEGMENT_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_segment_t, stream)

typedef struct ferry_send_args {
  uint32_t struct_size;
  uint32_t num_segments;
  /* Copied during the call: the caller may reuse it on return. At most
   * max_header_size bytes. Edge: may be NULL when header_len is 0. */
  const void* header;
  uint64_t header_len;
  /* The descriptor array is read during the call only; the bytes each
   * segment points to are borrowed until FERRY_EV_SEND_DONE. Edge: may be
   * NULL when num_segments is 0; a zero-length segment is a segment (it
   * arrives, with length 0). */
  const ferry_segment_t* segments;
  uint64_t segment_stride;
  void* user_data; /* returned in FERRY_EV_SEND_DONE */
} ferry_send_args_t;
#define FERRY_SEND_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_send_args_t, user_data)

/* Where one arriving segment goes. */
typedef struct ferry_place_dest {
  uint32_t struct_size;
  uint32_t reserved;
  /* Borrowed until FERRY_EV_PLACE_DONE. NULL drops this segment's bytes.
   * For segments that arrived inline, and zero-length ones, data and
   * capacity are ignored (the host copies those itself). */
  void* data;
  uint64_t capacity; /* must be >= the segment's length */
  ferry_device_t device;
  ferry_mr_t* mr; /* optional registration, owned by the host */
} ferry_place_dest_t;
#define FERRY_PLACE_DEST_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_place_dest_t, mr)

typedef struct ferry_place_args {
  uint32_t struct_size;
  uint32_t num_dests; /* must equal the arrival's num_segments */
  uint64_t msg_id;
  /* Read during the call only; buffers borrowed until PLACE_DONE. Edge:
   * may be NULL when num_dests is 0. */
  const ferry_place_dest_t* dests;
  uint64_t dest_stride;
  void* user_data; /* returned in FERRY_EV_PLACE_DONE */
} ferry_place_args_t;
#define FERRY_PLACE_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_place_args_t, user_data)

/* ------------------------------------------------------------------------ */
/* Memory registration                                                       */
/* ------------------------------------------------------------------------ */

#define FERRY_ACCESS_SEND ((uint32_t)1 << 0)
#define FERRY_ACCESS_RECV ((uint32_t)1 << 1)

typedef struct ferry_reg_args {
  uint32_t struct_size;
  uint32_t access; /* FERRY_ACCESS_* */
  void* data;      /* borrowed until dereg(): must stay allocated */
  uint64_t length;
  ferry_device_t device;
} ferry_reg_args_t;
#define FERRY_REG_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_reg_args_t, device)

/* ------------------------------------------------------------------------ */
/* The vtable                                                                */
/* ------------------------------------------------------------------------ */

/* All entries are optional in the struct_size sense, but the host refuses a
 * plugin whose vtable lacks a *required* one: init, fini, query, progress,
 * listen, listener_address, close_listener, connect, send, place, discard,
 * close. Optional: set_conn_user_data, reg, dereg, conn_peer_address, and
 * (0.2) mem_alloc, mem_free, mem_copy.
 *
 * Calls that take a ferry_error_buf_t* fill it on failure when non-NULL.
 * Unless FERRY_CAP_THREAD_SAFE, the host never makes two calls on one
 * context at the same time; progress() is never called concurrently with
 * itself on one context. Calls on different contexts never interfere.
 * Edge: the host may call into two contexts from two threads at once, also
 * without FERRY_CAP_THREAD_SAFE (which is about one context): nothing a
 * context keeps may be shared unprotected with another. A refused call
 * (any status but FERRY_OK) changed nothing and produces no event. */
typedef struct ferry_transport_vtable {
  uint32_t struct_size;
  uint32_t reserved;

  /* Creates a context. *out is owned by the host until fini(). A plugin may
   * be init'ed several times (several independent contexts). Returns
   * FERRY_UNAVAILABLE with a reason when the transport cannot run here.
   * Edge: without FERRY_FEATURE_MULTI_CONTEXT the host keeps one context at
   * a time; such a plugin may answer a second init() while one lives with
   * FERRY_FAILED_PRECONDITION. */
  ferry_status_t (*init)(const ferry_init_args_t* args, ferry_context_t** out,
                         ferry_error_buf_t* err);
  /* Destroys a context. The host normally closes every listener and
   * connection and waits for their FERRY_EV_CLOSED first.
   * Edge: it may also call fini() with listeners open, connections open or
   * closing, operations in flight and arrivals unanswered (a shutdown whose
   * grace period ended). fini() then returns at once, releases all of it
   * (no fd, thread or registration survives), returns no event, and never
   * touches a host buffer afterwards. To the peers, its connections end as
   * if the process had exited. */
  void (*fini)(ferry_context_t* ctx);
  /* Fills *info (the host sets info->struct_size). */
  ferry_status_t (*query)(ferry_context_t* ctx, ferry_context_info_t* info);
  /* Makes progress without blocking and returns up to max_events events.
   * Returns FERRY_OK (possibly with zero events) or a context error.
   * Edge: a status other than FERRY_OK returns no event (num_events 0,
   * nothing lost); the host may call again. */
  ferry_status_t (*progress)(ferry_context_t* ctx, ferry_progress_args_t* args);

  /* Opens a listener at once (no blocking).
   * Edge: an address the plugin cannot parse is FERRY_INVALID_ARGUMENT. An
   * address where a listener is open (a live one's listener_address()) is
   * FERRY_ALREADY_EXISTS, and that listener is untouched: listen() never
   * takes over an address. A plugin whose listener addresses are assigned,
   * not chosen (fabric: its endpoint's), may ignore the request and listen
   * at its own address instead; listener_address() says which. */
  ferry_status_t (*listen)(ferry_context_t* ctx, const ferry_listen_args_t* args,
                           ferry_listener_t** out, ferry_error_buf_t* err);
  /* Copies the address peers pass to connect() (NUL-terminated) into buf.
   * Returns FERRY_RESOURCE_EXHAUSTED if it does not fit. */
  ferry_status_t (*listener_address)(ferry_listener_t* listener, char* buf,
                                     uint64_t buf_len);
  /* Closes at once; connections already accepted stay open. No event: the
   * handle is invalid when it returns (see FERRY_EV_ACCEPTED for one
   * accepted just before). */
  void (*close_listener)(ferry_listener_t* listener);

  /* Starts connecting and returns at once; FERRY_EV_CONNECTED completes it.
   * Sends may be posted before it completes: they go out once connected, or
   * fail with the connect error. *out is valid until FERRY_EV_CLOSED.
   * Edge: connect() itself refuses (nothing posted, no handle, no event)
   * only what it can tell from its arguments and local resources: an
   * address it cannot parse, "" included, is FERRY_INVALID_ARGUMENT; out of
   * memory or fds, FERRY_RESOURCE_EXHAUSTED. Whether anything listens at a
   * well-formed address is always answered by FERRY_EV_CONNECTED
   * (UNAVAILABLE), even when the plugin knows at once. */
  ferry_status_t (*connect)(ferry_context_t* ctx, const ferry_connect_args_t* args,
                            ferry_conn_t** out, ferry_error_buf_t* err);
  /* Sets the value reported as conn_user_data in this conn's events. */
  void (*set_conn_user_data)(ferry_conn_t* conn, void* user_data);
  /* Posts a message. FERRY_INVALID_ARGUMENT for a malformed one (bad
   * struct_size, NULL data with a length, unsupported device),
   * FERRY_RESOURCE_EXHAUSTED for one over a limit (header, segments, message
   * size; checked from the lengths alone, before any data pointer is read),
   * FERRY_UNAVAILABLE for back-pressure only (retry after progress()), the
   * break's status (FERRY_PEER_GONE, ...) on a broken connection and
   * FERRY_FAILED_PRECONDITION on a closing one: in each case nothing was
   * posted. A broken connection never answers FERRY_UNAVAILABLE.
   * Edge: on a connection whose connect failed, FERRY_FAILED_PRECONDITION.
   * A connection the plugin knows is broken may refuse before its
   * CONN_BROKEN is returned, or accept and complete the send with the
   * break's status. Exactly max_segments segments, a header of exactly
   * max_header_size and a message of exactly max_message_size are valid. */
  ferry_status_t (*send)(ferry_conn_t* conn, const ferry_send_args_t* args,
                         ferry_error_buf_t* err);
  /* Answers an arrival by giving destinations for its segments; completes
   * with FERRY_EV_PLACE_DONE. An arrival whose segments are all inline may
   * also be answered with place() (no bytes move; it still completes).
   * Wrong msg_id, num_dests or a capacity below the segment's length:
   * FERRY_INVALID_ARGUMENT, nothing changes. On a broken connection place()
   * may fail with the break's status; the arrival then stays held until
   * discard() or close(). Edge: after close() (which released every held
   * arrival) place() and discard() answer FERRY_FAILED_PRECONDITION and
   * change nothing. */
  ferry_status_t (*place)(ferry_conn_t* conn, const ferry_place_args_t* args,
                          ferry_error_buf_t* err);
  /* Answers an arrival by dropping it: its bytes are skipped, later messages
   * are unaffected, and its header and inline data become invalid. Not an
   * operation: produces no event. Also how the host releases an all-inline
   * arrival it has finished reading. Succeeds for any held arrival, also on
   * a broken connection; an unknown msg_id is FERRY_INVALID_ARGUMENT. */
  ferry_status_t (*discard)(ferry_conn_t* conn, uint64_t msg_id, ferry_error_buf_t* err);
  /* Starts closing: pending operations complete with FERRY_CANCELLED (or the
   * error that broke the connection), then FERRY_EV_CLOSED is returned.
   * Edge: a send may also complete OK when all of it was handed over; a
   * placement in flight completes OK (every byte landed) or CANCELLED, and
   * after its PLACE_DONE the plugin never writes its destinations again. A
   * second close() before CLOSED is a no-op; after CLOSED the handle is
   * gone and the host never passes it again. */
  void (*close)(ferry_conn_t* conn);

  /* Registers memory for sends and placements. *out is owned by the host
   * and released with dereg(). */
  ferry_status_t (*reg)(ferry_context_t* ctx, const ferry_reg_args_t* args,
                        ferry_mr_t** out, ferry_error_buf_t* err);
  void (*dereg)(ferry_context_t* ctx, ferry_mr_t* mr);

  /* Copies a printable description of the peer's address into buf. */
  ferry_status_t (*conn_peer_address)(ferry_conn_t* conn, char* buf, uint64_t buf_len);

  /* 0.2. Device memory services, offered by a plugin whose memory_kinds
   * include device memory (all three or none). The host uses them where it
   * has no device runtime of its own: mem_alloc/mem_free are the default
   * allocator of receive buffers in device memory (an application may set
   * its own, ferry.h), and mem_copy stages device segments through host
   * memory for a peer no device-capable transport reaches. Unlike the
   * entries above, all three may be called from any thread, at any time
   * between init() and fini(), concurrently with anything. */

  /* Allocates `length` bytes (> 0) on `device`; *out is owned by the host
   * and released with mem_free(). FERRY_INVALID_ARGUMENT for a device the
   * context does not move, FERRY_RESOURCE_EXHAUSTED when out of memory. */
  ferry_status_t (*mem_alloc)(ferry_context_t* ctx, ferry_device_t device,
                              uint64_t length, void** out, ferry_error_buf_t* err);
  void (*mem_free)(ferry_context_t* ctx, ferry_device_t device, void* data);
  /* Copies `length` bytes from src to dst, either of which may be host or
   * device memory of a kind the context moves, after the work submitted to
   * `src_stream` (FERRY_STREAM_* or a stream handle). Synchronous: when it
   * returns FERRY_OK, dst holds the bytes. */
  ferry_status_t (*mem_copy)(ferry_context_t* ctx, void* dst, ferry_device_t dst_device,
                             const void* src, ferry_device_t src_device, uint64_t length,
                             uint64_t src_stream, ferry_error_buf_t* err);
} ferry_transport_vtable_t;
#define FERRY_TRANSPORT_VTABLE_STRUCT_SIZE \
  FERRY_STRUCT_SIZE(ferry_transport_vtable_t, mem_copy)

/* ------------------------------------------------------------------------ */
/* Negotiation: the entry point                                              */
/* ------------------------------------------------------------------------ */

/* Feature bits a plugin declares for the library as a whole (independent of
 * any context). */
#define FERRY_FEATURE_MULTI_CONTEXT ((uint64_t)1 << 0) /* several inits */

typedef struct ferry_negotiate_args {
  uint32_t struct_size;
  /* in: the host's offer. */
  uint32_t abi_major;
  uint32_t abi_minor_min;
  uint32_t abi_minor_max;
  const ferry_host_services_t* host; /* borrowed: see ferry_host_services_t */
  ferry_error_buf_t* err;            /* in: may be NULL; filled on failure */

  /* out: the plugin's answer. On FERRY_INCOMPATIBLE the plugin still fills
   * its own range so the host can say which versions would work. */
  uint32_t chosen_minor; /* highest minor both support */
  uint32_t plugin_abi_major;
  uint32_t plugin_minor_min;
  uint32_t plugin_minor_max;
  uint64_t features;                      /* FERRY_FEATURE_* */
  const char* name;                       /* static: "tcp" (lower case, [a-z0-9_]) */
  const char* version;                    /* static: the plugin's own version */
  const ferry_transport_vtable_t* vtable; /* static */
} ferry_negotiate_args_t;
#define FERRY_NEGOTIATE_ARGS_STRUCT_SIZE FERRY_STRUCT_SIZE(ferry_negotiate_args_t, vtable)

/* Returns FERRY_OK, or FERRY_INCOMPATIBLE when the ranges do not overlap
 * (or the major differs), or another status with a message in args->err.
 * May be called more than once; it must not allocate anything that needs a
 * matching release. */
typedef ferry_status_t (*ferry_transport_negotiate_fn)(ferry_negotiate_args_t* args);

/* Plugins declare their entry point with this macro, so it carries the right
 * signature and default visibility:
 *   FERRY_TRANSPORT_EXPORT ferry_status_t ferry_transport_negotiate(
 *       ferry_negotiate_args_t* args) { ... } */
#if defined(__GNUC__)
#define FERRY_TRANSPORT_EXPORT __attribute__((visibility("default")))
#else
#define FERRY_TRANSPORT_EXPORT
#endif

/* ------------------------------------------------------------------------ */
/* Helpers for plugin authors                                                */
/* ------------------------------------------------------------------------ */
/* Static inline functions: they add no symbols to a plugin. Define
 * FERRY_TRANSPORT_NO_HELPERS before including this header to leave them out
 * (they need <stdarg.h>, <stdio.h> and <string.h>). */
#ifndef FERRY_TRANSPORT_NO_HELPERS
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Writes a printf-style message into a caller's error buffer (may be NULL). */
static inline void ferry_error_printf(ferry_error_buf_t* err, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static inline void ferry_error_printf(ferry_error_buf_t* err, const char* fmt, ...) {
  va_list ap;
  if (err == NULL || err->data == NULL || err->capacity == 0 ||
      !FERRY_FIELD_PRESENT(err, ferry_error_buf_t, capacity)) {
    return;
  }
  va_start(ap, fmt);
  vsnprintf(err->data, (size_t)err->capacity, fmt, ap);
  va_end(ap);
}

/* Logs through the host when `level` is enabled. */
static inline void ferry_host_logf(const ferry_host_services_t* host, int32_t level,
                                   const char* plugin, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static inline void ferry_host_logf(const ferry_host_services_t* host, int32_t level,
                                   const char* plugin, const char* fmt, ...) {
  char line[1024];
  va_list ap;
  if (host == NULL || !FERRY_FIELD_PRESENT(host, ferry_host_services_t, log) ||
      host->log == NULL || level > host->log_level) {
    return;
  }
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  host->log(host->host_ctx, level, plugin, line);
}

/* Reads a plugin parameter as an integer; `fallback` when unset or not a
 * number. Accepts "1", "0", "true", "false", "yes", "no", "on", "off". */
static inline int64_t ferry_host_param_int(const ferry_host_services_t* host,
                                           const char* plugin, const char* key,
                                           int64_t fallback) {
  char buf[64];
  char* end = NULL;
  long long v;
  if (host == NULL || !FERRY_FIELD_PRESENT(host, ferry_host_services_t, get_param) ||
      host->get_param == NULL ||
      host->get_param(host->host_ctx, plugin, key, buf, sizeof buf) < 0) {
    return fallback;
  }
  if (strcmp(buf, "true") == 0 || strcmp(buf, "yes") == 0 || strcmp(buf, "on") == 0) {
    return 1;
  }
  if (strcmp(buf, "false") == 0 || strcmp(buf, "no") == 0 || strcmp(buf, "off") == 0) {
    return 0;
  }
  v = strtoll(buf, &end, 0);
  return (end != buf && *end == '\0') ? (int64_t)v : fallback;
}

/* The whole negotiation for a plugin that supports minors
 * [minor_min, minor_max] of FERRY_TRANSPORT_ABI_MAJOR: checks the offer,
 * fills every out field, and writes a clear message on failure. A plugin's
 * entry point is usually just a call to this. */
static inline ferry_status_t ferry_plugin_negotiate(
    ferry_negotiate_args_t* args, const char* name, const char* version,
    uint32_t minor_min, uint32_t minor_max, uint64_t features,
    const ferry_transport_vtable_t* vtable) {
  uint32_t lo, hi;
  if (args == NULL) return FERRY_INVALID_ARGUMENT;
  if (args->struct_size < FERRY_STRUCT_SIZE(ferry_negotiate_args_t, vtable)) {
    /* A host older than any this header knows: the out fields are not
     * there to write. */
    return FERRY_INCOMPATIBLE;
  }
  args->plugin_abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  args->plugin_minor_min = minor_min;
  args->plugin_minor_max = minor_max;
  args->name = name;
  args->version = version;
  args->features = features;
  args->vtable = NULL;
  args->chosen_minor = 0;
  if (args->abi_major != FERRY_TRANSPORT_ABI_MAJOR) {
    ferry_error_printf(args->err,
                       "plugin '%s' implements transport ABI major %u, the "
                       "host offered major %u: rebuild the plugin against "
                       "the host's ferry/transport.h",
                       name, (unsigned)FERRY_TRANSPORT_ABI_MAJOR,
                       (unsigned)args->abi_major);
    return FERRY_INCOMPATIBLE;
  }
  lo = args->abi_minor_min > minor_min ? args->abi_minor_min : minor_min;
  hi = args->abi_minor_max < minor_max ? args->abi_minor_max : minor_max;
  if (lo > hi) {
    ferry_error_printf(args->err,
                       "plugin '%s' supports transport ABI %u.%u-%u.%u, the "
                       "host offered %u.%u-%u.%u: no version in common",
                       name, (unsigned)FERRY_TRANSPORT_ABI_MAJOR, (unsigned)minor_min,
                       (unsigned)FERRY_TRANSPORT_ABI_MAJOR, (unsigned)minor_max,
                       (unsigned)args->abi_major, (unsigned)args->abi_minor_min,
                       (unsigned)args->abi_major, (unsigned)args->abi_minor_max);
    return FERRY_INCOMPATIBLE;
  }
  args->chosen_minor = hi;
  args->vtable = vtable;
  return FERRY_OK;
}
#endif /* FERRY_TRANSPORT_NO_HELPERS */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FERRY_TRANSPORT_H_ */
