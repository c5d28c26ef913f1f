/* A minimal valid plugin for the loader's own tests: it negotiates, creates
 * contexts and answers query(); every data-path entry says UNIMPLEMENTED.
 * init fails with UNAVAILABLE when FERRY_TESTNULL_FAIL_INIT=1, which is how
 * the tests see an "unusable here" plugin. reg/dereg are left out on purpose
 * (optional entries). */
#include <ferry/transport.h>

#include <stdlib.h>

struct ferry_context {
  int unused;
};

static ferry_status_t tn_init(const ferry_init_args_t* args, ferry_context_t** out,
                              ferry_error_buf_t* err) {
  const char* fail = getenv("FERRY_TESTNULL_FAIL_INIT");
  (void)args;
  if (fail != NULL && fail[0] == '1') {
    ferry_error_printf(err,
                       "testnull is told not to run here (FERRY_TESTNULL_FAIL_INIT=1)");
    return FERRY_UNAVAILABLE;
  }
  *out = (ferry_context_t*)calloc(1, sizeof(ferry_context_t));
  return *out ? FERRY_OK : FERRY_RESOURCE_EXHAUSTED;
}
static void tn_fini(ferry_context_t* ctx) {
  free(ctx);
}
static ferry_status_t tn_query(ferry_context_t* ctx, ferry_context_info_t* info) {
  (void)ctx;
  info->max_header_size = 64;
  info->caps = FERRY_CAP_ORDERED;
  info->memory_kinds = FERRY_MEM_HOST;
  info->max_message_size = 1024;
  info->max_inline_size = 0;
  info->max_segments = 1;
  info->wakeup_fd = -1;
  info->priority = 1;
  info->domain = "test-domain";
  info->description = "loader test fixture";
  return FERRY_OK;
}
static ferry_status_t tn_progress(ferry_context_t* c, ferry_progress_args_t* a) {
  (void)c;
  a->num_events = 0;
  return FERRY_OK;
}
static ferry_status_t tn_listen(ferry_context_t* c, const ferry_listen_args_t* a,
                                ferry_listener_t** o, ferry_error_buf_t* e) {
  (void)c;
  (void)a;
  (void)o;
  ferry_error_printf(e, "testnull cannot listen");
  return FERRY_UNIMPLEMENTED;
}
static ferry_status_t tn_listener_address(ferry_listener_t* l, char* b, uint64_t n) {
  (void)l;
  (void)b;
  (void)n;
  return FERRY_UNIMPLEMENTED;
}
static void tn_close_listener(ferry_listener_t* l) {
  (void)l;
}
static ferry_status_t tn_connect(ferry_context_t* c, const ferry_connect_args_t* a,
                                 ferry_conn_t** o, ferry_error_buf_t* e) {
  (void)c;
  (void)a;
  (void)o;
  ferry_error_printf(e, "testnull cannot connect");
  return FERRY_UNIMPLEMENTED;
}
static ferry_status_t tn_send(ferry_conn_t* c, const ferry_send_args_t* a,
                              ferry_error_buf_t* e) {
  (void)c;
  (void)a;
  ferry_error_printf(e, "testnull cannot send");
  return FERRY_UNIMPLEMENTED;
}
static ferry_status_t tn_place(ferry_conn_t* c, const ferry_place_args_t* a,
                               ferry_error_buf_t* e) {
  (void)c;
  (void)a;
  ferry_error_printf(e, "testnull cannot place");
  return FERRY_UNIMPLEMENTED;
}
static ferry_status_t tn_discard(ferry_conn_t* c, uint64_t id, ferry_error_buf_t* e) {
  (void)c;
  (void)id;
  ferry_error_printf(e, "testnull cannot discard");
  return FERRY_UNIMPLEMENTED;
}
static void tn_close(ferry_conn_t* c) {
  (void)c;
}

static const ferry_transport_vtable_t kVtable = {sizeof(ferry_transport_vtable_t),
                                                 0,
                                                 tn_init,
                                                 tn_fini,
                                                 tn_query,
                                                 tn_progress,
                                                 tn_listen,
                                                 tn_listener_address,
                                                 tn_close_listener,
                                                 tn_connect,
                                                 NULL,
                                                 tn_send,
                                                 tn_place,
                                                 tn_discard,
                                                 tn_close,
                                                 NULL,
                                                 NULL,
                                                 NULL,
                                                 NULL,
                                                 NULL,
                                                 NULL};

FERRY_TRANSPORT_EXPORT ferry_status_t
ferry_transport_negotiate(ferry_negotiate_args_t* args) {
  return ferry_plugin_negotiate(args, "testnull", "0.0.1-test", 1,
                                FERRY_TRANSPORT_ABI_MINOR, 0, &kVtable);
}
