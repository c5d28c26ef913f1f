/*
 * ferry/common.h — the vocabulary both of ferry's C interfaces share: the
 * struct-size rule, status codes, devices, streams and log levels.
 *
 * Two headers include it: ferry/transport.h (the plugin ABI, so a plugin
 * author still includes only transport.h) and ferry/ferry.h (the core's
 * public API, so an application sees these names without the plugin
 * vtable). Nobody needs to include it directly.
 *
 * Plain C99 and self-contained, under the same rules as transport.h
 * (docs/abi.md): fixed-width integers only, no enums or bool in structs.
 */
#ifndef FERRY_COMMON_H_
#define FERRY_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Struct sizes                                                              */
/* ------------------------------------------------------------------------ */

/* Size of a struct up to and including one field: the "size macros". A
 * struct's FERRY_*_STRUCT_SIZE names its last field, so adding a field
 * without updating the macro fails the size test (abi/tests). */
#define FERRY_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* True when `field` lies inside a struct whose writer set `struct_size`. */
#define FERRY_FIELD_PRESENT(ptr, type, field) \
  ((ptr)->struct_size >= FERRY_STRUCT_SIZE(type, field))

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/* Small integers with the meanings of absl::StatusCode, plus ferry's own
 * codes from 100 on. Every failing status that crosses the ABI comes with a
 * non-empty human-readable message (an event's `message`, or the caller's
 * error buffer). */
typedef int32_t ferry_status_t;

#define FERRY_OK 0
#define FERRY_CANCELLED 1 /* the operation was cancelled (close) */
#define FERRY_UNKNOWN 2
#define FERRY_INVALID_ARGUMENT 3 /* bad input: nothing was posted */
#define FERRY_DEADLINE_EXCEEDED 4
#define FERRY_NOT_FOUND 5
#define FERRY_ALREADY_EXISTS 6
#define FERRY_PERMISSION_DENIED 7
#define FERRY_RESOURCE_EXHAUSTED 8  /* over a limit (message size, memory) */
#define FERRY_FAILED_PRECONDITION 9 /* wrong state (e.g. already closed) */
#define FERRY_ABORTED 10
#define FERRY_OUT_OF_RANGE 11
#define FERRY_UNIMPLEMENTED 12 /* the plugin does not offer this */
#define FERRY_INTERNAL 13      /* a plugin bug, or a C++ exception */
#define FERRY_UNAVAILABLE                     \
  14 /* temporarily unable: retry later.      \
        From a post: back-pressure, call      \
        progress() and post again. From init: \
        this transport cannot run here. */
#define FERRY_DATA_LOSS 15
#define FERRY_UNAUTHENTICATED 16
#define FERRY_PEER_GONE 100    /* the remote side closed or died */
#define FERRY_INCOMPATIBLE 101 /* no common ABI / wire version */

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */
/* ------------------------------------------------------------------------ */

/* Where a buffer lives. `type` uses DLPack's DLDeviceType codes (the values
 * below are static-asserted against dlpack.h in ferry's tests), so a DLPack
 * tensor's device converts without a table. `id` is the device ordinal. */
typedef struct ferry_device {
  int32_t type;
  int32_t id;
} ferry_device_t;

#define FERRY_DEVICE_CPU 1           /* kDLCPU */
#define FERRY_DEVICE_CUDA 2          /* kDLCUDA */
#define FERRY_DEVICE_CUDA_HOST 3     /* kDLCUDAHost: pinned host memory */
#define FERRY_DEVICE_ROCM 10         /* kDLROCM */
#define FERRY_DEVICE_CUDA_MANAGED 13 /* kDLCUDAManaged */

/* Streams, for device memory: the values of a stream field that are not a
 * stream handle (a CUstream for CUDA). DLPack's __dlpack__(stream=...) uses
 * the same ones. */
#define FERRY_STREAM_READY ((uint64_t)0)      /* nothing to wait for */
#define FERRY_STREAM_LEGACY ((uint64_t)1)     /* the legacy default stream */
#define FERRY_STREAM_PER_THREAD ((uint64_t)2) /* the per-thread default stream */

/* ------------------------------------------------------------------------ */
/* Log levels                                                                */
/* ------------------------------------------------------------------------ */

/* The levels of the host's log (FERRY_LOG_LEVEL names them: "error",
 * "warn", ...) and of the log service a plugin is offered. */
#define FERRY_LOG_ERROR 0
#define FERRY_LOG_WARN 1
#define FERRY_LOG_INFO 2
#define FERRY_LOG_DEBUG 3
#define FERRY_LOG_TRACE 4

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FERRY_COMMON_H_ */
