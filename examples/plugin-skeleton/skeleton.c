/* A transport plugin to start from: every entry of the ABI in place, the
 * negotiation and the context done, the data path left to you. It loads,
 * `ferry info` lists it, and each data-path entry answers
 * FERRY_UNIMPLEMENTED with the name of what to write; replace them one by
 * one until `ferry-conformance --plugin libferry-skeleton.so` passes.
 *
 * The rules every entry must keep are in <ferry/transport.h> (read its
 * comments first; the notes marked "Edge:" settle the corner cases, which
 * docs/writing-a-plugin.md's "Edge cases" lists with the conformance
 * requirement that tests each); examples/c-plugin (uds.c) is
 * a complete plugin of the same shape over Unix sockets. Rename the plugin:
 * SKELETON_NAME here and `skeleton` in CMakeLists.txt (the file name
 * libferry-<name>.so and the declared name must agree). */
#include <ferry/transport.h>

#include <stdlib.h>
#include <string.h>

#define SKELETON_NAME "skeleton"
#define SKELETON_VERSION "0.1.0"

/* The host's services (log, parameters), saved at negotiation. */
static const ferry_host_services_t* g_host;

struct ferry_context {
  char description[128];
  /* Your state: sockets or endpoints, listeners, connections, the queue
   * of events progress() returns, the wakeup fd. */
};

static ferry_status_t todo(ferry_error_buf_t* err, const char* what) {
  ferry_error_printf(err, "%s: %s is not written yet (examples/plugin-skeleton)",
                     SKELETON_NAME, what);
  return FERRY_UNIMPLEMENTED;
}

static ferry_status_t sk_init(const ferry_init_args_t* args, ferry_context_t** out,
                              ferry_error_buf_t* err) {
  ferry_context_t* ctx;
  (void)args; /* args->flags: FERRY_INIT_BUSY_POLL; args->instance: a name */
  ctx = (ferry_context_t*)calloc(1, sizeof *ctx);
  if (ctx == NULL) {
    ferry_error_printf(err, "%s: out of memory", SKELETON_NAME);
    return FERRY_RESOURCE_EXHAUSTED;
  }
  strcpy(ctx->description, SKELETON_NAME ": a skeleton (moves nothing yet)");
  ferry_host_logf(g_host, FERRY_LOG_DEBUG, SKELETON_NAME, "context created");
  *out = ctx;
  return FERRY_OK;
}

static void sk_fini(ferry_context_t* ctx) {
  /* The host may fini() with listeners and connections still open and
   * operations in flight: release them all here, with no event. */
  free(ctx);
}

static ferry_status_t sk_query(ferry_context_t* ctx, ferry_context_info_t* info) {
  ferry_context_info_t mine;
  size_t size;
  if (info == NULL) return FERRY_INVALID_ARGUMENT;
  memset(&mine, 0, sizeof mine);
  mine.max_header_size = 64 * 1024;
  mine.caps = 0; /* FERRY_CAP_WAKEUP_FD, _ORDERED, ... once they hold */
  mine.memory_kinds = FERRY_MEM_HOST;
  mine.max_message_size = 1 << 20;
  mine.max_inline_size = 0;
  mine.max_segments = 16;
  mine.wakeup_fd = -1;
  mine.priority = 1; /* below tcp (10): never chosen over a working transport */
  mine.domain = "";  /* "": reaches any peer of this plugin */
  mine.description = ctx->description;
  /* Write only inside the smaller of both struct sizes, and say which. */
  size = info->struct_size < sizeof mine ? info->struct_size : sizeof mine;
  mine.struct_size = (uint32_t)size;
  memcpy(info, &mine, size);
  return FERRY_OK;
}

static ferry_status_t sk_progress(ferry_context_t* ctx, ferry_progress_args_t* args) {
  (void)ctx;
  args->num_events = 0; /* the events that completed since the last call */
  return FERRY_OK;
}

static ferry_status_t sk_listen(ferry_context_t* ctx, const ferry_listen_args_t* args,
                                ferry_listener_t** out, ferry_error_buf_t* err) {
  (void)ctx, (void)args, (void)out;
  return todo(err, "listen()");
}

static ferry_status_t sk_listener_address(ferry_listener_t* l, char* buf, uint64_t len) {
  (void)l, (void)buf, (void)len;
  return FERRY_UNIMPLEMENTED;
}

static void sk_close_listener(ferry_listener_t* l) {
  (void)l;
}

static ferry_status_t sk_connect(ferry_context_t* ctx, const ferry_connect_args_t* args,
                                 ferry_conn_t** out, ferry_error_buf_t* err) {
  (void)ctx, (void)args, (void)out;
  return todo(err, "connect()");
}

static ferry_status_t sk_send(ferry_conn_t* c, const ferry_send_args_t* args,
                              ferry_error_buf_t* err) {
  (void)c, (void)args;
  return todo(err, "send()");
}

static ferry_status_t sk_place(ferry_conn_t* c, const ferry_place_args_t* args,
                               ferry_error_buf_t* err) {
  (void)c, (void)args;
  return todo(err, "place()");
}

static ferry_status_t sk_discard(ferry_conn_t* c, uint64_t msg_id,
                                 ferry_error_buf_t* err) {
  (void)c, (void)msg_id;
  return todo(err, "discard()");
}

static void sk_close(ferry_conn_t* c) {
  (void)c;
}

static const ferry_transport_vtable_t sk_vtable = {
    .struct_size = FERRY_TRANSPORT_VTABLE_STRUCT_SIZE,
    .init = sk_init,
    .fini = sk_fini,
    .query = sk_query,
    .progress = sk_progress,
    .listen = sk_listen,
    .listener_address = sk_listener_address,
    .close_listener = sk_close_listener,
    .connect = sk_connect,
    .send = sk_send,
    .place = sk_place,
    .discard = sk_discard,
    .close = sk_close,
};

FERRY_TRANSPORT_EXPORT ferry_status_t
ferry_transport_negotiate(ferry_negotiate_args_t* args) {
  /* ABI 0.1 .. 0.1: the entries above; 0.2 adds device memory (optional). */
  ferry_status_t st =
      ferry_plugin_negotiate(args, SKELETON_NAME, SKELETON_VERSION, 1, 1, 0, &sk_vtable);
  if (st == FERRY_OK) g_host = args->host;
  return st;
}
