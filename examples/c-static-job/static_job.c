/* A static job in C (C99), started the way torchrun starts workers:
 *
 *   FERRY_STORE=127.0.0.1:29500 WORLD_SIZE=3 RANK=0 ./ferry-example-static-job &
 *   FERRY_STORE=127.0.0.1:29500 WORLD_SIZE=3 RANK=1 ./ferry-example-static-job &
 *   FERRY_STORE=127.0.0.1:29500 WORLD_SIZE=3 RANK=2 ./ferry-example-static-job
 *
 * (run.sh does that with a free port). The options name no world size, so
 * WORLD_SIZE and RANK make the job static (docs/membership.md); rank 0
 * hosts the store, as torch's rank 0 hosts its TCPStore. Start returns once
 * all ranks joined; rank 0 calls "square" on every other rank; the others
 * go straight to shutdown, which is the job-wide barrier: they keep
 * serving until rank 0 is done too. Exits 0 when everything worked. */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void square(void* user_data, ferry_call_t* call, ferry_message_t* args) {
  uint64_t n = 0;
  const char* bytes = (const char*)ferry_message_bytes(args, &n);
  char in[32] = {0}, out[32];
  ferry_payload_t p;
  long v;
  (void)user_data;
  memcpy(in, bytes, n < sizeof in - 1 ? (size_t)n : sizeof in - 1);
  v = strtol(in, NULL, 10);
  snprintf(out, sizeof out, "%ld", v * v);
  memset(&p, 0, sizeof p);
  p.struct_size = FERRY_PAYLOAD_STRUCT_SIZE;
  p.bytes = out;
  p.num_bytes = strlen(out);
  ferry_call_reply(call, &p);
}

static int fail(const char* what, ferry_status_t s) {
  fprintf(stderr, "%s: %s: %s\n", what, ferry_status_name(s), ferry_last_error());
  return 1;
}

int main(void) {
  const char* env_rank = getenv("RANK");
  char name[64];
  ferry_worker_options_t o;
  ferry_worker_t* w = NULL;
  ferry_member_t members[16];
  uint32_t count = 0, i;
  int32_t rank;
  uint32_t world_size;
  ferry_status_t s;
  int errors = 0;

  snprintf(name, sizeof name, "worker%s", env_rank ? env_rank : "?");
  memset(&o, 0, sizeof o);
  o.struct_size = FERRY_WORKER_OPTIONS_STRUCT_SIZE;
  o.name = name;
  o.transport = "tcp";
  o.flags = env_rank && strcmp(env_rank, "0") == 0 ? FERRY_WORKER_HOST_STORE : 0;
  /* world_size 0: WORLD_SIZE / RANK decide (a static job under torchrun). */
  s = ferry_worker_start(&o, &w);
  if (s != FERRY_OK) return fail("start", s);
  rank = ferry_worker_rank(w);
  world_size = ferry_worker_world_size(w);
  ferry_register(w, "square", square, NULL, 0);
  printf("%s: rank %d of %u, id %llu\n", name, (int)rank, (unsigned)world_size,
         (unsigned long long)ferry_worker_id(w));

  if (rank == 0) {
    /* Every member is known once start returned; 0.2 elements carry rank. */
    members[0].struct_size = FERRY_MEMBER_STRUCT_SIZE;
    s = ferry_worker_members(w, members, 16, &count);
    if (s != FERRY_OK) return fail("members", s);
    if (count != world_size) {
      fprintf(stderr, "%u members, expected %u\n", (unsigned)count, (unsigned)world_size);
      errors++;
    }
    for (i = 1; i < world_size; ++i) {
      char to[64], arg[32], want[32];
      ferry_payload_t p;
      ferry_message_t* r = NULL;
      uint64_t n = 0;
      const char* got;
      snprintf(to, sizeof to, "worker%u", (unsigned)i);
      snprintf(arg, sizeof arg, "%u", (unsigned)(i + 5));
      snprintf(want, sizeof want, "%u", (unsigned)((i + 5) * (i + 5)));
      memset(&p, 0, sizeof p);
      p.struct_size = FERRY_PAYLOAD_STRUCT_SIZE;
      p.bytes = arg;
      p.num_bytes = strlen(arg);
      s = ferry_rpc_sync(w, to, "square", &p, 0, &r);
      if (s != FERRY_OK) return fail("rpc_sync", s);
      got = (const char*)ferry_message_bytes(r, &n);
      if (n != strlen(want) || memcmp(got, want, (size_t)n) != 0) {
        fprintf(stderr, "square(%s) on %s: wrong answer\n", arg, to);
        errors++;
      }
      ferry_message_release(r);
    }
    /* A name that is not a member fails at once in a static job. */
    {
      ferry_message_t* none = NULL;
      s = ferry_rpc_sync(w, "nobody", "square", NULL, 60000, &none);
      if (none != NULL) ferry_message_release(none);
    }
    if (s != FERRY_NOT_FOUND) {
      fprintf(stderr, "a call to 'nobody' gave %s\n", ferry_status_name(s));
      errors++;
    }
    printf("%s: %u calls answered\n", name, (unsigned)(world_size - 1));
  }

  /* The job-wide barrier, no time limit (as torch's shutdown()). */
  s = ferry_worker_shutdown_ex(w, FERRY_SHUTDOWN_GRACEFUL, FERRY_NO_TIMEOUT);
  if (s != FERRY_OK) return fail("shutdown", s);
  printf("%s: shutdown done\n", name);
  ferry_worker_destroy(w);
  return errors == 0 ? 0 : 1;
}
