/* A plain C caller of typed C++ functions (ferry/typed.hpp), through ferry.h
 * alone: docs/api.md says C "builds the same bytes with any msgpack library
 * and calls ferry_rpc_sync". This test builds them by hand from the layout
 * documented there (the marker C1 'F' 'T' '1', then one msgpack value: the
 * arguments as an array) and reads the result the same way, against
 * ferry-test-worker's typed_add (int64, int64) -> int64 and typed_describe
 * (string, list[int64], map[string, float64]) -> string. A wrong argument
 * type and a payload without the marker must fail with INVALID_ARGUMENT.
 * Compiled as C99; exits 0 when every check holds. */
#define _POSIX_C_SOURCE 200809L

#include <ferry/ferry.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

static int failures = 0;

#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
      ++failures;                                             \
    }                                                         \
  } while (0)

/* ---- msgpack, the few formats the test needs (big-endian throughout) ---- */

typedef struct {
  unsigned char bytes[256];
  size_t len;
} buf_t;

static void put(buf_t* b, const void* p, size_t n) {
  memcpy(b->bytes + b->len, p, n);
  b->len += n;
}
static void put_byte(buf_t* b, unsigned c) {
  b->bytes[b->len++] = (unsigned char)c;
}
static void put_marker(buf_t* b) {
  static const unsigned char marker[4] = {0xC1, 'F', 'T', '1'};
  put(b, marker, sizeof marker);
}
static void put_array(buf_t* b, unsigned n) { /* fixarray, n < 16 */
  put_byte(b, 0x90 | n);
}
static void put_map(buf_t* b, unsigned n) { /* fixmap, n < 16 */
  put_byte(b, 0x80 | n);
}
static void put_uint(buf_t* b, unsigned v) { /* positive fixint, v < 128 */
  put_byte(b, v);
}
static void put_str(buf_t* b, const char* s) { /* fixstr, < 32 bytes */
  put_byte(b, 0xA0 | (unsigned)strlen(s));
  put(b, s, strlen(s));
}
static void put_double(buf_t* b, double d) { /* float 64 */
  uint64_t bits;
  int i;
  memcpy(&bits, &d, sizeof bits);
  put_byte(b, 0xCB);
  for (i = 7; i >= 0; --i) put_byte(b, (unsigned)(bits >> (8 * i)) & 0xFF);
}

static uint64_t be(const unsigned char* p, int n) {
  uint64_t v = 0;
  int i;
  for (i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

/* Skips the marker; NULL when the reply does not start with it. */
static const unsigned char* typed_value(const unsigned char* p, uint64_t n,
                                        uint64_t* rest) {
  if (n < 4 || p[0] != 0xC1 || p[1] != 'F' || p[2] != 'T' || p[3] != '1') return NULL;
  *rest = n - 4;
  return p + 4;
}

/* Any msgpack integer format, as msgpack-c++ may pack an int64 compactly. */
static int read_int(const unsigned char* p, uint64_t n, int64_t* out) {
  if (n >= 1 && p[0] <= 0x7F) return *out = p[0], 1;
  if (n >= 1 && p[0] >= 0xE0) return *out = (int8_t)p[0], 1;
  if (n >= 2 && p[0] == 0xCC) return *out = p[1], 1;
  if (n >= 3 && p[0] == 0xCD) return *out = (int64_t)be(p + 1, 2), 1;
  if (n >= 5 && p[0] == 0xCE) return *out = (int64_t)be(p + 1, 4), 1;
  if (n >= 9 && p[0] == 0xCF) return *out = (int64_t)be(p + 1, 8), 1;
  if (n >= 2 && p[0] == 0xD0) return *out = (int8_t)p[1], 1;
  if (n >= 3 && p[0] == 0xD1) return *out = (int16_t)be(p + 1, 2), 1;
  if (n >= 5 && p[0] == 0xD2) return *out = (int32_t)be(p + 1, 4), 1;
  if (n >= 9 && p[0] == 0xD3) return *out = (int64_t)be(p + 1, 8), 1;
  return 0;
}

/* fixstr, str8 or str16: the bytes and their length. */
static int read_str(const unsigned char* p, uint64_t n, const char** s, uint64_t* len) {
  uint64_t head = 0;
  if (n >= 1 && (p[0] & 0xE0) == 0xA0) {
    head = 1, *len = p[0] & 0x1F;
  } else if (n >= 2 && p[0] == 0xD9) {
    head = 2, *len = p[1];
  } else if (n >= 3 && p[0] == 0xDA) {
    head = 3, *len = be(p + 1, 2);
  } else {
    return 0;
  }
  if (n < head + *len) return 0;
  *s = (const char*)p + head;
  return 1;
}

/* ---- the server process ------------------------------------------------ */

/* Reads lines from `fd` until one starts with "READY" (1) or 30 s pass or
 * the pipe closes (0). */
static int wait_ready(int fd) {
  char line[512];
  size_t used = 0;
  for (;;) {
    struct pollfd p;
    ssize_t got;
    char* nl;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, 30000) <= 0) return 0;
    got = read(fd, line + used, sizeof line - 1 - used);
    if (got <= 0) return 0;
    used += (size_t)got;
    line[used] = '\0';
    while ((nl = strchr(line, '\n')) != NULL) {
      if (strncmp(line, "READY", 5) == 0) return 1;
      memmove(line, nl + 1, used - (size_t)(nl + 1 - line) + 1);
      used -= (size_t)(nl + 1 - line);
    }
    if (used == sizeof line - 1) used = 0; /* a very long line: not READY */
  }
}

static pid_t spawn_server(const char* store, const char* job, int* to_child,
                          int* from_child) {
  int in[2], out[2];
  pid_t pid = -1;
  posix_spawn_file_actions_t fa;
  char* argv[] = {(char*)FERRY_TEST_WORKER,
                  "--name",
                  "server",
                  "--store",
                  (char*)store,
                  "--job",
                  (char*)job,
                  "--secret",
                  "test-secret",
                  NULL};
  if (pipe(in) != 0 || pipe(out) != 0) return -1;
  fcntl(in[1], F_SETFD, FD_CLOEXEC);
  fcntl(out[0], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[0]);
  posix_spawn_file_actions_addclose(&fa, out[1]);
  if (posix_spawn(&pid, FERRY_TEST_WORKER, &fa, NULL, argv, environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  *to_child = in[1];
  *from_child = out[0];
  return pid;
}

/* ---- the calls --------------------------------------------------------- */

static ferry_status_t call(ferry_worker_t* w, const char* function, const buf_t* args,
                           ferry_message_t** reply) {
  ferry_payload_t p;
  memset(&p, 0, sizeof p);
  p.struct_size = FERRY_PAYLOAD_STRUCT_SIZE;
  p.bytes = args->bytes;
  p.num_bytes = args->len;
  *reply = NULL;
  return ferry_rpc_sync(w, "server", function, &p, 20000, reply);
}

static void typed_add(ferry_worker_t* w) {
  buf_t a = {{0}, 0};
  ferry_message_t* r = NULL;
  const unsigned char *bytes, *v;
  uint64_t n = 0, rest = 0;
  int64_t sum = 0;
  ferry_status_t s;
  put_marker(&a);
  put_array(&a, 2);
  put_uint(&a, 40);
  put_uint(&a, 2);
  s = call(w, "typed_add", &a, &r);
  CHECK(s == FERRY_OK, "typed_add(40, 2): %s: %s", ferry_status_name(s),
        ferry_last_error());
  if (s != FERRY_OK) return;
  bytes = (const unsigned char*)ferry_message_bytes(r, &n);
  v = typed_value(bytes, n, &rest);
  CHECK(v != NULL, "typed_add's reply (%llu bytes) lacks the typed marker",
        (unsigned long long)n);
  CHECK(v != NULL && read_int(v, rest, &sum) && sum == 42,
        "typed_add(40, 2) answered %lld, not 42 (or not a msgpack integer)",
        (long long)sum);
  ferry_message_release(r);
}

static void typed_describe(ferry_worker_t* w) {
  static const char want[] = "w0: 3 values, sum 6, 2 weights, total 4";
  buf_t a = {{0}, 0};
  ferry_message_t* r = NULL;
  const unsigned char *bytes, *v;
  const char* text = NULL;
  uint64_t n = 0, rest = 0, len = 0;
  ferry_status_t s;
  put_marker(&a);
  put_array(&a, 3);
  put_str(&a, "w0");
  put_array(&a, 3);
  put_uint(&a, 1);
  put_uint(&a, 2);
  put_uint(&a, 3);
  put_map(&a, 2);
  put_str(&a, "a");
  put_double(&a, 1.5);
  put_str(&a, "b");
  put_double(&a, 2.5);
  s = call(w, "typed_describe", &a, &r);
  CHECK(s == FERRY_OK, "typed_describe: %s: %s", ferry_status_name(s),
        ferry_last_error());
  if (s != FERRY_OK) return;
  bytes = (const unsigned char*)ferry_message_bytes(r, &n);
  v = typed_value(bytes, n, &rest);
  CHECK(v != NULL && read_str(v, rest, &text, &len) && len == strlen(want) &&
            memcmp(text, want, (size_t)len) == 0,
        "typed_describe answered '%.*s', not '%s'", text ? (int)len : 0, text ? text : "",
        want);
  ferry_message_release(r);
}

static void refusals(ferry_worker_t* w) {
  buf_t wrong = {{0}, 0}, bare = {{0}, 0};
  ferry_message_t* r = NULL;
  ferry_status_t s;
  /* A string where typed_add takes an int64: refused, naming its types. */
  put_marker(&wrong);
  put_array(&wrong, 2);
  put_str(&wrong, "forty");
  put_uint(&wrong, 2);
  s = call(w, "typed_add", &wrong, &r);
  CHECK(s == FERRY_INVALID_ARGUMENT, "typed_add(\"forty\", 2): %s, not INVALID_ARGUMENT",
        ferry_status_name(s));
  CHECK(strstr(ferry_last_error(), "int64") != NULL,
        "the refusal does not name the types typed_add takes: %s", ferry_last_error());
  if (r != NULL) ferry_message_release(r);
  /* The same msgpack array without the marker is not a typed payload. */
  put_array(&bare, 2);
  put_uint(&bare, 40);
  put_uint(&bare, 2);
  r = NULL;
  s = call(w, "typed_add", &bare, &r);
  CHECK(s == FERRY_INVALID_ARGUMENT, "typed_add without the marker: %s",
        ferry_status_name(s));
  CHECK(strstr(ferry_last_error(), "marker") != NULL,
        "the refusal does not mention the marker: %s", ferry_last_error());
  if (r != NULL) ferry_message_release(r);
}

int main(void) {
  char job[64];
  ferry_worker_options_t o;
  ferry_worker_t* w = NULL;
  ferry_status_t s;
  int to_child = -1, from_child = -1, status = 0;
  pid_t pid;

  signal(SIGPIPE, SIG_IGN);
  snprintf(job, sizeof job, "typed_from_c_%ld", (long)getpid());
  memset(&o, 0, sizeof o);
  o.struct_size = FERRY_WORKER_OPTIONS_STRUCT_SIZE;
  o.flags = FERRY_WORKER_HOST_STORE | FERRY_WORKER_ELASTIC;
  o.name = "c-caller";
  o.job = job;
  o.transport = "tcp";
  o.store_address = "127.0.0.1:0";
  o.secret = "test-secret";
  s = ferry_worker_start(&o, &w);
  if (s != FERRY_OK) {
    fprintf(stderr, "start: %s: %s\n", ferry_status_name(s), ferry_last_error());
    return 1;
  }
  pid = spawn_server(ferry_worker_store_address(w), job, &to_child, &from_child);
  CHECK(pid > 0, "could not start %s", FERRY_TEST_WORKER);
  if (pid > 0 && wait_ready(from_child)) {
    typed_add(w);
    typed_describe(w);
    refusals(w);
  } else {
    CHECK(0, "the server (%s) did not say READY", FERRY_TEST_WORKER);
  }
  if (pid > 0) {
    close(to_child); /* the server leaves */
    waitpid(pid, &status, 0);
    close(from_child);
  }
  ferry_worker_shutdown(w, 2000);
  ferry_worker_destroy(w);
  if (failures == 0) printf("typed_from_c_test: every check passed\n");
  return failures == 0 ? 0 : 1;
}
