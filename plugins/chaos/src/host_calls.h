// The functions behind the chaos plugin's vtable slots (entry.cc says which
// fills which). Each checks its handle and arguments, takes the context
// lock, and hands the call to the context, which forwards it to the inner
// transport. They may throw: the entry shim (ferry_plugin/entry.h) guards
// every one.
#pragma once

#include "status.h"

#include <ferry/transport.h>

#include <cstdint>

namespace ferry_chaos::host_calls {

Status Init(const ferry_init_args_t* args, ferry_context_t** out);
void Fini(ferry_context_t* handle);
Status Query(ferry_context_t* handle, ferry_context_info_t* info);
Status Progress(ferry_context_t* handle, ferry_progress_args_t* args);
Status Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
              ferry_listener_t** out);
Status ListenerAddress(ferry_listener_t* handle, char* buf, uint64_t buf_len);
void CloseListener(ferry_listener_t* handle);
Status Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
               ferry_conn_t** out);
void SetConnUserData(ferry_conn_t* handle, void* user_data);
Status Send(ferry_conn_t* handle, const ferry_send_args_t* args);
Status Place(ferry_conn_t* handle, const ferry_place_args_t* args);
Status Discard(ferry_conn_t* handle, uint64_t msg_id);
void Close(ferry_conn_t* handle);
Status Reg(ferry_context_t* handle, const ferry_reg_args_t* args, ferry_mr_t** out);
void Dereg(ferry_context_t* handle, ferry_mr_t* mr);
Status ConnPeerAddress(ferry_conn_t* handle, char* buf, uint64_t buf_len);

}  // namespace ferry_chaos::host_calls
