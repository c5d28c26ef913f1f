/* Compiled by the abi_header_c99* tests with -std=c99 -pedantic -Werror:
 * ferry/transport.h must stay plain C99 that any C compiler accepts. */
#include <ferry/transport.h>

/* Touch the helpers so an unused-function warning or a C99 violation in
 * them would fail the build. */
int ferry_header_check(ferry_negotiate_args_t* args);
int ferry_header_check(ferry_negotiate_args_t* args) {
  ferry_error_buf_t err = {0, 0, NULL, 0};
  err.struct_size = FERRY_ERROR_BUF_STRUCT_SIZE;
  ferry_error_printf(&err, "%d", 1);
  ferry_host_logf(NULL, FERRY_LOG_INFO, "check", "%s", "x");
  (void)ferry_host_param_int(NULL, "check", "key", 0);
  return ferry_plugin_negotiate(args, "check", "0", 1, 1, 0, NULL);
}
