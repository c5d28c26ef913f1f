/* Compiled by the abi_header_c99_ferry test with -std=c99 -pedantic -Werror:
 * ferry/ferry.h, the API applications include, must stay plain C99 and must
 * not bring the plugin ABI (ferry/transport.h) with it: what both share is
 * in ferry/common.h. */
#include <ferry/ferry.h>

#ifdef FERRY_TRANSPORT_H_
#error \
    "ferry/ferry.h includes ferry/transport.h: applications must not see the plugin ABI"
#endif

/* The shared names are there without transport.h. */
int ferry_h_check(ferry_status_t status, ferry_device_t device);
int ferry_h_check(ferry_status_t status, ferry_device_t device) {
  return status == FERRY_OK && device.type == FERRY_DEVICE_CPU &&
         FERRY_LOG_ERROR < FERRY_LOG_TRACE;
}
