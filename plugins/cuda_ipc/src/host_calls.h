// The functions behind the cuda_ipc plugin's vtable slots (entry.cc says
// which fills which). Each checks its handle and arguments and hands the
// call to the context, connection or listener. The host serialises every
// call but the memory services (the plugin does not claim
// FERRY_CAP_THREAD_SAFE); mem_alloc, mem_free and mem_copy may come from
// any thread (device.h locks for them). They may throw: the entry shim
// guards every one.
#pragma once

#include "status.h"

#include <ferry/transport.h>

#include <cstdint>

namespace ferry_cuda_ipc::host_calls {

Status Init(const ferry_init_args_t* args, ferry_context_t** out);
void Fini(ferry_context_t* handle);
Status Query(ferry_context_t* handle, ferry_context_info_t* info);
ferry_status_t Progress(ferry_context_t* handle, ferry_progress_args_t* args,
                        Status* error);
Status Listen(ferry_context_t* handle, const ferry_listen_args_t* args,
              ferry_listener_t** out);
Status ListenerAddress(ferry_listener_t* handle, char* buf, uint64_t buf_len);
void CloseListener(ferry_listener_t* handle);
Status Connect(ferry_context_t* handle, const ferry_connect_args_t* args,
               ferry_conn_t** out);
void SetConnUserData(ferry_conn_t* handle, void* user_data);
ferry_status_t Send(ferry_conn_t* handle, const ferry_send_args_t* args, Status* error);
ferry_status_t Place(ferry_conn_t* handle, const ferry_place_args_t* args, Status* error);
ferry_status_t Discard(ferry_conn_t* handle, uint64_t msg_id, Status* error);
void Close(ferry_conn_t* handle);
Status ConnPeerAddress(ferry_conn_t* handle, char* buf, uint64_t buf_len);

Status MemAlloc(ferry_context_t* handle, ferry_device_t device, uint64_t length,
                void** out);
void MemFree(ferry_context_t* handle, ferry_device_t device, void* data);
Status MemCopy(ferry_context_t* handle, void* dst, ferry_device_t dst_device,
               const void* src, ferry_device_t src_device, uint64_t length,
               uint64_t src_stream);

}  // namespace ferry_cuda_ipc::host_calls
