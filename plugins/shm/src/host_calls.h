// The functions behind the shm plugin's vtable slots (entry.cc says which
// fills which). Each turns its handles into objects and hands the call to
// the context or connection, which lock for themselves. They may throw: the
// entry shim (ferry_plugin/entry.h) guards every one.
#pragma once

#include "status.h"

#include <ferry/transport.h>

#include <cstdint>

namespace ferry_shm::host_calls {

Status Init(const ferry_init_args_t* args, ferry_context_t** out);
void Fini(ferry_context_t* ctx);
Status Query(ferry_context_t* ctx, ferry_context_info_t* info);
Status Progress(ferry_context_t* ctx, ferry_progress_args_t* args);
Status Listen(ferry_context_t* ctx, const ferry_listen_args_t* args,
              ferry_listener_t** out);
Status ListenerAddress(ferry_listener_t* listener, char* buf, uint64_t buf_len);
void CloseListener(ferry_listener_t* listener);
Status Connect(ferry_context_t* ctx, const ferry_connect_args_t* args,
               ferry_conn_t** out);
void SetConnUserData(ferry_conn_t* conn, void* user_data);
Status Send(ferry_conn_t* conn, const ferry_send_args_t* args);
Status Place(ferry_conn_t* conn, const ferry_place_args_t* args);
Status Discard(ferry_conn_t* conn, uint64_t msg_id);
void Close(ferry_conn_t* conn);
Status ConnPeerAddress(ferry_conn_t* conn, char* buf, uint64_t buf_len);

}  // namespace ferry_shm::host_calls
