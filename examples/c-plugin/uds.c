/*
 * uds.c: a complete ferry transport plugin over Unix domain sockets
 * (SOCK_STREAM), in plain C99, built against nothing but <ferry/transport.h>.
 *
 * It is the starting point for a plugin author, so it favours being obviously
 * correct over being fast; docs/writing-a-plugin.md walks through it. What it
 * shows:
 *   - the one exported entry point, answered by ferry_plugin_negotiate();
 *   - a context with listeners and connections, all non-blocking;
 *   - the completion model: posting calls (connect, send, place, close) only
 *     check their arguments and queue work; progress() does all socket I/O
 *     and returns queued events. Nothing ever completes inside the call that
 *     posted it;
 *   - arrivals: the header and small segments arrive inline, the host answers
 *     with place() (we read the rest straight into its buffers) or discard();
 *   - close() and peer death: every pending operation completes exactly once;
 *   - a wakeup fd (an epoll fd) so the host can sleep instead of polling.
 *
 * Threading: none. We do not claim FERRY_CAP_THREAD_SAFE, so the host never
 * makes two calls on one context at once and we need no locks at all.
 *
 * Wire format (both ends are on one host, so native byte order), per message:
 *   preamble {u32 magic, u32 num_segments, u64 header_len}
 *   u64 length[num_segments]
 *   header bytes
 *   the bytes of every "inline" segment (length <= UDS_MAX_INLINE), in order
 *   the bytes of every other segment, in order
 * Sending the small segments first lets the receiver deliver all of them in
 * the arrival event, whatever their position in the message.
 */
#define _GNU_SOURCE /* accept4, MSG_NOSIGNAL, SOCK_CLOEXEC, EPOLLRDHUP */

#include <ferry/transport.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- Limits and names ------------------------------------------------ */

#define UDS_NAME "uds"
#define UDS_VERSION "0.1.0"
#define UDS_ABI_MINOR_MIN 1 /* the transport ABI minors this file implements */
#define UDS_ABI_MINOR_MAX 1

#define UDS_MAX_HEADER (64u * 1024)           /* advertised max_header_size */
#define UDS_MAX_MESSAGE ((uint64_t)256 << 20) /* header + segments, bytes */
#define UDS_MAX_INLINE 4096u                  /* segments this small arrive inline */
#define UDS_MAX_SEGMENTS 64u
#define UDS_WIRE_MAGIC 0x31445546u /* "FUD1": change the digit on a wire change */
#define UDS_PRIORITY 20            /* above tcp (10), below shm (50) */

#define UDS_PATH_MAX sizeof(((struct sockaddr_un*)0)->sun_path)

/* The host's services, from negotiation; valid until the process exits. */
static const ferry_host_services_t* g_host;
#define LOG(level, ...) ferry_host_logf(g_host, level, UDS_NAME, __VA_ARGS__)

/* ---- Objects --------------------------------------------------------- */

/* One queued event. Every operation allocates its completion event when it is
 * posted, so completing it later can never fail for lack of memory: "every
 * posted operation completes exactly once" holds even under out-of-memory. */
typedef struct uds_event {
  struct uds_event* next;
  ferry_event_t ev;  /* conn_user_data is filled when delivered */
  char message[256]; /* ev.message points here when status != OK */
} uds_event_t;

typedef struct wire_preamble {
  uint32_t magic;
  uint32_t num_segments;
  uint64_t header_len;
} wire_preamble_t;

/* One posted send: an iovec over our copy of the preamble, lengths and header
 * (meta[]), then the caller's segment bytes, borrowed until SEND_DONE. */
typedef struct uds_send {
  struct uds_send* next;
  uds_event_t* done; /* SEND_DONE, allocated by send() */
  int iov_count, iov_next;
  struct iovec iov[1 + UDS_MAX_SEGMENTS];
  unsigned char meta[]; /* C99 flexible array member */
} uds_send_t;

/* What an epoll_event's data.ptr points at (the eventfd uses NULL). */
enum { OBJ_LISTENER = 1, OBJ_CONN = 2 };

struct ferry_listener {
  int kind; /* OBJ_LISTENER: first, see progress() */
  ferry_context_t* ctx;
  int fd;
  void* user_data;
  struct ferry_listener *prev, *next;
  char path[UDS_PATH_MAX];
};

enum conn_state {
  CONN_OPEN,   /* connected (or connecting: UDS connects at once) */
  CONN_FAILED, /* connect failed or the peer went away; fd closed */
  CONN_CLOSING /* the host called close(); CLOSED is queued */
};

/* Receive side: a small state machine, driven only by progress(). */
enum rx_stage {
  RX_PREAMBLE, /* reading wire_preamble_t into rx_buf */
  RX_LENGTHS,  /* reading the segment lengths */
  RX_BODY,     /* reading the header and the inline segments */
  RX_HELD,     /* ARRIVAL queued: waiting for place() or discard() */
  RX_PAYLOAD   /* reading the other segments into rx_dest (NULL: drop) */
};

struct ferry_conn {
  int kind; /* OBJ_CONN */
  ferry_context_t* ctx;
  int fd;           /* -1 once failed or closing */
  int state;        /* enum conn_state */
  int announced;    /* the host has seen CONNECTED / ACCEPTED */
  int peer_hung_up; /* seen while holding an arrival: see below */
  ferry_status_t fail_status;
  char fail_message[200];
  void* user_data;     /* reported as conn_user_data */
  uint32_t epoll_mask; /* what fd is registered for; 0: not at all */
  struct ferry_conn *prev, *next;
  /* Preallocated events, NULL once queued. */
  uds_event_t *ev_announce, *ev_broken, *ev_closed;

  uds_send_t *send_head, *send_tail; /* posted, not yet fully written */

  int rx_stage;
  unsigned char* rx_buf; /* preamble, lengths, header, inline bytes */
  size_t rx_cap, rx_have, rx_need;
  uint64_t msg_id; /* of the last arrival */
  uint32_t rx_nseg;
  uint64_t rx_header_len;
  uint64_t rx_len[UDS_MAX_SEGMENTS];
  ferry_arrival_segment_t rx_seg[UDS_MAX_SEGMENTS]; /* the ARRIVAL's array */
  void* rx_dest[UDS_MAX_SEGMENTS];
  uint32_t rx_cur;          /* RX_PAYLOAD: segment being read ... */
  uint64_t rx_done;         /* ... and how much of it */
  uds_event_t* rx_place_ev; /* PLACE_DONE of a place(); NULL for discard() */
};

struct ferry_context {
  int epfd;                     /* the wakeup fd: every socket, plus evfd */
  int evfd;                     /* readable while events wait to be returned */
  int woken;                    /* evfd is signalled */
  unsigned next_name;           /* for generated socket names */
  uds_event_t *q_head, *q_tail; /* events waiting for progress() */
  uds_event_t* retired;         /* returned by the last progress(): their
                                   messages stay valid until the next one */
  ferry_listener_t* listeners;
  ferry_conn_t* conns;
  char dir[UDS_PATH_MAX]; /* where listen("") puts its socket */
  char domain[256];
  char description[256];
  unsigned char scratch[64 * 1024]; /* sink for dropped bytes */
};

/* ---- The event queue ------------------------------------------------- */

static uds_event_t* event_new(void) {
  return calloc(1, sizeof(uds_event_t));
}

/* Makes the wakeup fd readable (the host may be asleep in poll()). */
static void ctx_wake(ferry_context_t* ctx) {
  uint64_t one = 1;
  if (!ctx->woken && write(ctx->evfd, &one, sizeof one) == (ssize_t)sizeof one)
    ctx->woken = 1;
}

/* Fills `e` and appends it to the queue; progress() returns it later. */
static void event_queue(ferry_context_t* ctx, uds_event_t* e, int32_t type,
                        ferry_status_t status, ferry_conn_t* conn, void* user_data,
                        const char* message) {
  e->ev.type = type;
  e->ev.status = status;
  e->ev.conn = conn;
  e->ev.user_data = user_data;
  if (status != FERRY_OK) {
    snprintf(e->message, sizeof e->message, "uds: %s",
             message != NULL && message[0] != '\0' ? message : "failed");
    e->ev.message = e->message;
  }
  e->next = NULL;
  if (ctx->q_tail != NULL)
    ctx->q_tail->next = e;
  else
    ctx->q_head = e;
  ctx->q_tail = e;
  ctx_wake(ctx);
}

static void event_free_list(uds_event_t* e) {
  while (e != NULL) {
    uds_event_t* next = e->next;
    free(e);
    e = next;
  }
}

/* ---- Connections: epoll interest, failure, pending operations -------- */

/* The fd's epoll interest follows the state, so the wakeup fd is readable
 * only when progress() has something to do: EPOLLOUT while sends wait,
 * EPOLLIN while we are ready to read. We stop reading while an arrival waits
 * for its answer (that is our flow control) but still watch for a hang-up,
 * and we start reading only once the host has seen the connection (so every
 * event carries the conn_user_data it set). */
static void conn_update_epoll(ferry_conn_t* c) {
  struct epoll_event ev;
  uint32_t want = 0;
  int op;
  if (c->fd < 0) return;
  if (c->send_head != NULL) want |= EPOLLOUT;
  if (c->announced && c->rx_stage != RX_HELD) want |= EPOLLIN;
  if (c->rx_stage == RX_HELD && !c->peer_hung_up) want |= EPOLLRDHUP;
  if (want == c->epoll_mask) return;
  memset(&ev, 0, sizeof ev);
  ev.events = want;
  ev.data.ptr = c;
  op = want == 0 ? EPOLL_CTL_DEL : c->epoll_mask == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (epoll_ctl(c->ctx->epfd, op, c->fd, &ev) == 0)
    c->epoll_mask = want;
  else
    LOG(FERRY_LOG_ERROR, "epoll_ctl: %s", strerror(errno));
}

/* Removes the fd from epoll *before* closing it: a forked child may still
 * hold the socket, and epoll would then keep reporting a freed pointer. */
static void close_fd(ferry_context_t* ctx, int* fd) {
  if (*fd < 0) return;
  epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, *fd, NULL);
  close(*fd);
  *fd = -1;
}

static void rx_reset(ferry_conn_t* c) {
  c->rx_stage = RX_PREAMBLE;
  c->rx_have = 0;
  c->rx_need = sizeof(wire_preamble_t);
}

/* Completes every pending operation of `c` with `status`: queued sends and a
 * placement in progress. An arrival the host has not answered is not an
 * operation; it stays answerable until close(). */
static void conn_complete_pending(ferry_conn_t* c, ferry_status_t status,
                                  const char* why) {
  while (c->send_head != NULL) {
    uds_send_t* s = c->send_head;
    c->send_head = s->next;
    event_queue(c->ctx, s->done, FERRY_EV_SEND_DONE, status, c, s->done->ev.user_data,
                why);
    free(s);
  }
  c->send_tail = NULL;
  if (c->rx_stage == RX_PAYLOAD) {
    if (c->rx_place_ev != NULL)
      event_queue(c->ctx, c->rx_place_ev, FERRY_EV_PLACE_DONE, status, c,
                  c->rx_place_ev->ev.user_data, why);
    c->rx_place_ev = NULL;
    rx_reset(c);
  }
}

/* The connection broke (EOF, reset, malformed frame): fail what is pending
 * and tell the host once with CONN_BROKEN. The host still close()s it. */
static void conn_fail(ferry_conn_t* c, ferry_status_t status, const char* why) {
  if (c->state != CONN_OPEN) return;
  c->state = CONN_FAILED;
  c->fail_status = status;
  snprintf(c->fail_message, sizeof c->fail_message, "%s", why);
  close_fd(c->ctx, &c->fd);
  c->epoll_mask = 0;
  conn_complete_pending(c, status, why);
  event_queue(c->ctx, c->ev_broken, FERRY_EV_CONN_BROKEN, status, c, NULL, why);
  c->ev_broken = NULL;
  LOG(FERRY_LOG_DEBUG, "connection broken: %s", why);
}

/* An OS error on a socket: EOF-like errors mean the peer is gone. */
static void conn_fail_errno(ferry_conn_t* c, const char* what, int err) {
  char why[160];
  int gone = err == EPIPE || err == ECONNRESET || err == ENOTCONN;
  snprintf(why, sizeof why, "%s: %s%s", what, strerror(err),
           gone ? " (the peer closed or died)" : "");
  conn_fail(c, gone ? FERRY_PEER_GONE : FERRY_UNKNOWN, why);
}

static ferry_conn_t* conn_new(ferry_context_t* ctx) {
  ferry_conn_t* c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->kind = OBJ_CONN;
  c->ctx = ctx;
  c->fd = -1;
  c->ev_announce = event_new();
  c->ev_broken = event_new();
  c->ev_closed = event_new();
  c->rx_cap = 4096;
  c->rx_buf = malloc(c->rx_cap);
  if (!c->ev_announce || !c->ev_broken || !c->ev_closed || !c->rx_buf) {
    free(c->ev_announce);
    free(c->ev_broken);
    free(c->ev_closed);
    free(c->rx_buf);
    free(c);
    return NULL;
  }
  rx_reset(c);
  c->next = ctx->conns;
  if (ctx->conns != NULL) ctx->conns->prev = c;
  ctx->conns = c;
  return c;
}

/* Frees a connection whose CLOSED event has been returned (or at fini). */
static void conn_free(ferry_conn_t* c) {
  ferry_context_t* ctx = c->ctx;
  close_fd(ctx, &c->fd);
  while (c->send_head != NULL) { /* only at fini, for unclosed conns */
    uds_send_t* s = c->send_head;
    c->send_head = s->next;
    free(s->done);
    free(s);
  }
  free(c->rx_place_ev);
  free(c->ev_announce);
  free(c->ev_broken);
  free(c->ev_closed);
  free(c->rx_buf);
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    ctx->conns = c->next;
  if (c->next != NULL) c->next->prev = c->prev;
  free(c);
}

/* ---- Sending: write queued frames until the socket would block ------- */

static void conn_flush(ferry_conn_t* c) {
  while (c->state == CONN_OPEN && c->send_head != NULL) {
    uds_send_t* s = c->send_head;
    struct msghdr mh;
    ssize_t n;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = s->iov + s->iov_next;
    mh.msg_iovlen = (size_t)(s->iov_count - s->iov_next);
    /* MSG_NOSIGNAL: a dead peer gives EPIPE, never SIGPIPE (which would kill
     * the host process). */
    n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) conn_fail_errno(c, "sendmsg", errno);
      return;
    }
    while (n > 0) { /* advance over what was written */
      struct iovec* v = &s->iov[s->iov_next];
      size_t step = (size_t)n < v->iov_len ? (size_t)n : v->iov_len;
      v->iov_base = (char*)v->iov_base + step;
      v->iov_len -= step;
      n -= (ssize_t)step;
      if (v->iov_len == 0) s->iov_next++;
    }
    if (s->iov_next == s->iov_count) {
      c->send_head = s->next;
      if (c->send_head == NULL) c->send_tail = NULL;
      event_queue(c->ctx, s->done, FERRY_EV_SEND_DONE, FERRY_OK, c, s->done->ev.user_data,
                  NULL);
      free(s);
    }
  }
}

/* ---- Receiving: meta, then ARRIVAL, then payload --------------------- */

static int is_inline(uint64_t length) {
  return length <= UDS_MAX_INLINE;
}

/* Non-inline bytes of the held arrival, i.e. what place/discard must read. */
static uint64_t rx_payload_bytes(const ferry_conn_t* c) {
  uint64_t sum = 0;
  uint32_t i;
  for (i = 0; i < c->rx_nseg; i++)
    if (!is_inline(c->rx_len[i])) sum += c->rx_len[i];
  return sum;
}

/* The peer hung up while the host holds an arrival. If the socket does not
 * hold the rest of that message, it never will: fail now, not whenever the
 * host answers. Otherwise keep the message, stop watching, and let the reads
 * after the host's answer find the EOF (messages sent before it still count). */
static void conn_check_hangup(ferry_conn_t* c) {
  int queued = 0;
  if (ioctl(c->fd, FIONREAD, &queued) != 0 || (uint64_t)queued < rx_payload_bytes(c))
    conn_fail(c, FERRY_PEER_GONE,
              "the peer closed the connection in the middle of a message");
  else
    c->peer_hung_up = 1;
}

/* All the bytes of the current stage are in rx_buf: parse them, check them
 * (the peer is not trusted), and move on. */
static void rx_meta_step(ferry_conn_t* c) {
  wire_preamble_t p;
  uint64_t total, inline_bytes = 0;
  uint32_t i;
  char why[160];
  switch (c->rx_stage) {
    case RX_PREAMBLE:
      memcpy(&p, c->rx_buf, sizeof p);
      if (p.magic != UDS_WIRE_MAGIC || p.num_segments > UDS_MAX_SEGMENTS ||
          p.header_len > UDS_MAX_HEADER) {
        snprintf(why, sizeof why,
                 "malformed frame from the peer (magic %#x, %u "
                 "segments, %llu-byte header)",
                 (unsigned)p.magic, (unsigned)p.num_segments,
                 (unsigned long long)p.header_len);
        conn_fail(c, FERRY_DATA_LOSS, why);
        return;
      }
      c->rx_nseg = p.num_segments;
      c->rx_header_len = p.header_len;
      c->rx_need += sizeof(uint64_t) * p.num_segments;
      c->rx_stage = RX_LENGTHS;
      break;
    case RX_LENGTHS:
      memcpy(c->rx_len, c->rx_buf + sizeof p, sizeof(uint64_t) * c->rx_nseg);
      total = c->rx_header_len;
      for (i = 0; i < c->rx_nseg; i++) {
        if (c->rx_len[i] > UDS_MAX_MESSAGE - total) {
          conn_fail(c, FERRY_DATA_LOSS,
                    "malformed frame from the peer: "
                    "message larger than max_message_size");
          return;
        }
        total += c->rx_len[i];
        if (is_inline(c->rx_len[i])) inline_bytes += c->rx_len[i];
      }
      c->rx_need += (size_t)(c->rx_header_len + inline_bytes);
      c->rx_stage = RX_BODY;
      break;
    case RX_BODY: {
      /* The header and inline bytes are here: describe them in ARRIVAL. The
       * pointers into rx_buf stay valid until place()/discard(), because we
       * read nothing more from this connection until then. */
      uds_event_t* e = event_new();
      const unsigned char* at = c->rx_buf + sizeof p + sizeof(uint64_t) * c->rx_nseg;
      if (e == NULL) {
        conn_fail(c, FERRY_RESOURCE_EXHAUSTED, "out of memory for an arrival");
        return;
      }
      e->ev.msg_id = ++c->msg_id;
      e->ev.header = at;
      e->ev.header_len = c->rx_header_len;
      e->ev.num_segments = c->rx_nseg;
      e->ev.segments = c->rx_seg;
      e->ev.segment_stride = sizeof(ferry_arrival_segment_t);
      at += c->rx_header_len;
      for (i = 0; i < c->rx_nseg; i++) {
        ferry_arrival_segment_t* s = &c->rx_seg[i];
        memset(s, 0, sizeof *s);
        s->struct_size = (uint32_t)sizeof *s;
        s->length = c->rx_len[i];
        s->device.type = FERRY_DEVICE_CPU;
        if (is_inline(c->rx_len[i])) {
          s->inline_data = at;
          at += c->rx_len[i];
        }
      }
      c->rx_stage = RX_HELD;
      event_queue(c->ctx, e, FERRY_EV_ARRIVAL, FERRY_OK, c, NULL, NULL);
      if (c->peer_hung_up) conn_check_hangup(c); /* is the rest still coming? */
      return;
    }
  }
  if (c->rx_need > c->rx_cap) { /* at most preamble + lengths + 64 KiB + 256 KiB */
    unsigned char* bigger = realloc(c->rx_buf, c->rx_need);
    if (bigger == NULL) {
      conn_fail(c, FERRY_RESOURCE_EXHAUSTED, "out of memory for a message header");
      return;
    }
    c->rx_buf = bigger;
    c->rx_cap = c->rx_need;
  }
}

/* The placement (or discard) has read its last byte. */
static void rx_payload_done(ferry_conn_t* c) {
  if (c->rx_place_ev != NULL)
    event_queue(c->ctx, c->rx_place_ev, FERRY_EV_PLACE_DONE, FERRY_OK, c,
                c->rx_place_ev->ev.user_data, NULL);
  c->rx_place_ev = NULL;
  rx_reset(c);
}

/* Reads until the socket is empty or the host's answer is needed. Each read
 * asks for exactly the bytes of the current stage, so segment bytes go
 * straight from the socket into the host's buffers. (A faster plugin reads
 * ahead into a buffer and saves system calls on small messages.) */
static void conn_read(ferry_conn_t* c) {
  while (c->state == CONN_OPEN && c->announced && c->rx_stage != RX_HELD) {
    void* dst;
    size_t want;
    ssize_t n;
    if (c->rx_stage == RX_PAYLOAD) {
      uint64_t left;
      while (c->rx_cur < c->rx_nseg &&
             (is_inline(c->rx_len[c->rx_cur]) || c->rx_done == c->rx_len[c->rx_cur])) {
        c->rx_cur++;
        c->rx_done = 0;
      }
      if (c->rx_cur == c->rx_nseg) {
        rx_payload_done(c);
        continue;
      }
      left = c->rx_len[c->rx_cur] - c->rx_done;
      if (c->rx_dest[c->rx_cur] != NULL) {
        dst = (char*)c->rx_dest[c->rx_cur] + c->rx_done;
        want = left > (uint64_t)SSIZE_MAX ? (size_t)SSIZE_MAX : (size_t)left;
      } else { /* dropped: read into scratch */
        dst = c->ctx->scratch;
        want = left < sizeof c->ctx->scratch ? (size_t)left : sizeof c->ctx->scratch;
      }
    } else {
      if (c->rx_have == c->rx_need) {
        rx_meta_step(c);
        continue;
      }
      dst = c->rx_buf + c->rx_have;
      want = c->rx_need - c->rx_have;
    }
    n = recv(c->fd, dst, want, 0);
    if (n == 0) {
      conn_fail(c, FERRY_PEER_GONE,
                c->rx_stage == RX_PREAMBLE && c->rx_have == 0
                    ? "the peer closed the connection"
                    : "the peer closed the connection in the middle of a message");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) conn_fail_errno(c, "recv", errno);
      return;
    }
    if (c->rx_stage == RX_PAYLOAD)
      c->rx_done += (uint64_t)n;
    else
      c->rx_have += (size_t)n;
  }
}

/* ---- Listeners ------------------------------------------------------- */

/* Accepts every pending connection; each becomes an ACCEPTED event. */
static void listener_accept(ferry_listener_t* l) {
  for (;;) {
    ferry_conn_t* c;
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        LOG(FERRY_LOG_WARN, "accept on %s: %s", l->path, strerror(errno));
      return;
    }
    c = conn_new(l->ctx);
    if (c == NULL) {
      LOG(FERRY_LOG_ERROR, "out of memory: refusing a connection on %s", l->path);
      close(fd);
      continue;
    }
    c->fd = fd;
    event_queue(l->ctx, c->ev_announce, FERRY_EV_ACCEPTED, FERRY_OK, c, l->user_data,
                NULL);
    c->ev_announce = NULL;
  }
}

/* listen("") puts sockets in a directory only we can enter: the parameter
 * "dir" (FERRY_UDS_DIR), else $XDG_RUNTIME_DIR/ferry-uds-<uid>, else
 * /tmp/ferry-uds-<uid>. Created 0700 and checked: never trust a directory
 * in /tmp that someone else may have made. */
static ferry_status_t ensure_private_dir(ferry_context_t* ctx, ferry_error_buf_t* err) {
  struct stat st;
  if (strlen(ctx->dir) + 32 >= UDS_PATH_MAX) {
    ferry_error_printf(err, "uds: socket directory %s is too long for a socket path",
                       ctx->dir);
    return FERRY_INVALID_ARGUMENT;
  }
  if (mkdir(ctx->dir, 0700) != 0 && errno != EEXIST) {
    ferry_error_printf(err, "uds: cannot create %s: %s", ctx->dir, strerror(errno));
    return FERRY_UNAVAILABLE;
  }
  if (lstat(ctx->dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
      (st.st_mode & 077) != 0) {
    ferry_error_printf(err,
                       "uds: %s is not a directory private to uid %u (mode 0700):"
                       " fix or remove it, or set FERRY_UDS_DIR",
                       ctx->dir, (unsigned)geteuid());
    return FERRY_PERMISSION_DENIED;
  }
  return FERRY_OK;
}

static void unix_address(struct sockaddr_un* sa, const char* path) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  memcpy(sa->sun_path, path, strlen(path)); /* callers checked the length */
}

/* Binds to `path`, or to a fresh name in ctx->dir when `path` is "". */
static int bind_listener(ferry_context_t* ctx, ferry_listener_t* l, const char* path) {
  struct sockaddr_un sa;
  int tries = 0, rc;
  do { /* a generated name may be taken (another context, a stale socket) */
    int n = path[0] != '\0' ? snprintf(l->path, sizeof l->path, "%s", path)
                            : snprintf(l->path, sizeof l->path, "%s/%ld-%u.sock",
                                       ctx->dir, (long)getpid(), ctx->next_name++);
    if (n < 0 || n >= (int)sizeof l->path) {
      errno = ENAMETOOLONG;
      return -1;
    }
    unix_address(&sa, l->path);
    rc = bind(l->fd, (struct sockaddr*)&sa, sizeof sa);
  } while (rc != 0 && errno == EADDRINUSE && path[0] == '\0' && ++tries < 1000);
  return rc;
}

static ferry_status_t uds_listen(ferry_context_t* ctx, const ferry_listen_args_t* args,
                                 ferry_listener_t** out, ferry_error_buf_t* err) {
  struct epoll_event ev;
  ferry_listener_t* l;
  ferry_status_t st;
  int bound, e;
  if (args == NULL || out == NULL ||
      !FERRY_FIELD_PRESENT(args, ferry_listen_args_t, user_data) ||
      args->address == NULL || strlen(args->address) >= UDS_PATH_MAX) {
    ferry_error_printf(err,
                       "uds: listen needs an address: \"\" or a socket path shorter"
                       " than %u bytes",
                       (unsigned)UDS_PATH_MAX);
    return FERRY_INVALID_ARGUMENT;
  }
  if (args->address[0] == '\0' && (st = ensure_private_dir(ctx, err)) != FERRY_OK)
    return st;
  l = calloc(1, sizeof *l);
  if (l == NULL) {
    ferry_error_printf(err, "uds: out of memory");
    return FERRY_RESOURCE_EXHAUSTED;
  }
  l->kind = OBJ_LISTENER;
  l->ctx = ctx;
  l->user_data = args->user_data;
  l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd < 0) {
    ferry_error_printf(err, "uds: socket: %s", strerror(errno));
    free(l);
    return FERRY_RESOURCE_EXHAUSTED;
  }
  bound = bind_listener(ctx, l, args->address) == 0;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.ptr = l;
  if (!bound || listen(l->fd, SOMAXCONN) != 0 ||
      epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, l->fd, &ev) != 0) {
    e = errno;
    st = e == EADDRINUSE ? FERRY_ALREADY_EXISTS
         : e == EACCES   ? FERRY_PERMISSION_DENIED
                         : FERRY_UNAVAILABLE;
    ferry_error_printf(
        err, "uds: cannot listen on %s: %s%s", l->path, strerror(e),
        e == EADDRINUSE ? " (in use, or a stale socket file to remove)" : "");
    if (bound) unlink(l->path);
    close(l->fd);
    free(l);
    return st;
  }
  l->next = ctx->listeners;
  if (ctx->listeners != NULL) ctx->listeners->prev = l;
  ctx->listeners = l;
  *out = l;
  return FERRY_OK;
}

static ferry_status_t uds_listener_address(ferry_listener_t* l, char* buf, uint64_t len) {
  if (buf == NULL || strlen(l->path) + 1 > len) return FERRY_RESOURCE_EXHAUSTED;
  memcpy(buf, l->path, strlen(l->path) + 1);
  return FERRY_OK;
}

/* Closes at once and removes the socket file; accepted connections live on. */
static void uds_close_listener(ferry_listener_t* l) {
  ferry_context_t* ctx = l->ctx;
  close_fd(ctx, &l->fd);
  unlink(l->path);
  if (l->prev != NULL)
    l->prev->next = l->next;
  else
    ctx->listeners = l->next;
  if (l->next != NULL) l->next->prev = l->prev;
  free(l);
}

/* ---- Connections: the posting calls ---------------------------------- */

static ferry_status_t uds_connect(ferry_context_t* ctx, const ferry_connect_args_t* args,
                                  ferry_conn_t** out, ferry_error_buf_t* err) {
  struct sockaddr_un sa;
  ferry_conn_t* c;
  if (args == NULL || out == NULL ||
      !FERRY_FIELD_PRESENT(args, ferry_connect_args_t, user_data) ||
      args->address == NULL || args->address[0] == '\0' ||
      strlen(args->address) >= UDS_PATH_MAX) {
    ferry_error_printf(err,
                       "uds: connect needs a socket path of 1 to %u bytes "
                       "(a listener's address)",
                       (unsigned)UDS_PATH_MAX - 1);
    return FERRY_INVALID_ARGUMENT;
  }
  c = conn_new(ctx);
  if (c == NULL) {
    ferry_error_printf(err, "uds: out of memory");
    return FERRY_RESOURCE_EXHAUSTED;
  }
  c->user_data = args->user_data;
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) {
    ferry_error_printf(err, "uds: socket: %s", strerror(errno));
    conn_free(c);
    return FERRY_RESOURCE_EXHAUSTED;
  }
  unix_address(&sa, args->address);
  /* On Linux a Unix socket connects at once or fails at once (it never says
   * EINPROGRESS; EAGAIN means the listener's backlog is full). Either way the
   * answer goes into the queue: connect() must not complete inline. */
  if (connect(c->fd, (struct sockaddr*)&sa, sizeof sa) == 0) {
    event_queue(ctx, c->ev_announce, FERRY_EV_CONNECTED, FERRY_OK, c, args->user_data,
                NULL);
  } else {
    int e = errno;
    snprintf(c->fail_message, sizeof c->fail_message, "cannot connect to %s: %s",
             args->address, e == EAGAIN ? "the listener's backlog is full" : strerror(e));
    c->fail_status = FERRY_UNAVAILABLE;
    c->state = CONN_FAILED;
    close_fd(ctx, &c->fd);
    event_queue(ctx, c->ev_announce, FERRY_EV_CONNECTED, c->fail_status, c,
                args->user_data, c->fail_message);
  }
  c->ev_announce = NULL;
  *out = c;
  return FERRY_OK;
}

static void uds_set_conn_user_data(ferry_conn_t* c, void* user_data) {
  c->user_data = user_data;
}

/* Host memory only: that is what query() advertises. A missing device field
 * reads as zero, which we also take as host memory. */
static int is_host_device(ferry_device_t d) {
  return d.type == 0 || d.type == FERRY_DEVICE_CPU || d.type == FERRY_DEVICE_CUDA_HOST;
}

/* A post on a failed connection: PEER_GONE when the peer went away, else
 * FAILED_PRECONDITION. Never UNAVAILABLE, which would tell the host to retry. */
static ferry_status_t refuse_failed(ferry_conn_t* c, ferry_error_buf_t* err) {
  ferry_error_printf(err, "uds: connection failed: %s", c->fail_message);
  return c->fail_status == FERRY_PEER_GONE ? FERRY_PEER_GONE : FERRY_FAILED_PRECONDITION;
}

static ferry_status_t uds_send(ferry_conn_t* c, const ferry_send_args_t* a,
                               ferry_error_buf_t* err) {
  uint64_t total, len[UDS_MAX_SEGMENTS];
  wire_preamble_t p;
  uds_send_t* s;
  size_t meta_len;
  uint32_t i, pass;
  if (a == NULL || !FERRY_FIELD_PRESENT(a, ferry_send_args_t, user_data)) {
    ferry_error_printf(err, "uds: send needs a ferry_send_args_t");
    return FERRY_INVALID_ARGUMENT;
  }
  if (c->state == CONN_CLOSING) {
    ferry_error_printf(err, "uds: send on a connection that is closing");
    return FERRY_FAILED_PRECONDITION;
  }
  /* 1. Limits, from the sizes alone: an oversized message is refused before
   *    we look at a single data pointer. */
  if (a->header_len > UDS_MAX_HEADER) {
    ferry_error_printf(err, "uds: header of %llu bytes exceeds max_header_size %u",
                       (unsigned long long)a->header_len, UDS_MAX_HEADER);
    return FERRY_RESOURCE_EXHAUSTED;
  }
  if (a->num_segments > UDS_MAX_SEGMENTS) {
    ferry_error_printf(err, "uds: %u segments exceed max_segments %u",
                       (unsigned)a->num_segments, UDS_MAX_SEGMENTS);
    return FERRY_RESOURCE_EXHAUSTED;
  }
  if ((a->num_segments > 0 &&
       (a->segments == NULL ||
        a->segment_stride < FERRY_STRUCT_SIZE(ferry_segment_t, length)))) {
    ferry_error_printf(err, "uds: %u segments (at most %u, strided by at least %u bytes)",
                       (unsigned)a->num_segments, UDS_MAX_SEGMENTS,
                       (unsigned)FERRY_STRUCT_SIZE(ferry_segment_t, length));
    return FERRY_INVALID_ARGUMENT;
  }
  total = a->header_len;
  for (i = 0; i < a->num_segments; i++) {
    const ferry_segment_t* seg =
        FERRY_ELEMENT_AT(const ferry_segment_t, a->segments, a->segment_stride, i);
    if (!FERRY_FIELD_PRESENT(seg, ferry_segment_t, length)) {
      ferry_error_printf(err, "uds: segment %u: struct_size %u is too small", (unsigned)i,
                         (unsigned)seg->struct_size);
      return FERRY_INVALID_ARGUMENT;
    }
    len[i] = seg->length;
    if (len[i] > UDS_MAX_MESSAGE - total) {
      ferry_error_printf(err, "uds: message exceeds max_message_size (%llu bytes)",
                         (unsigned long long)UDS_MAX_MESSAGE);
      return FERRY_RESOURCE_EXHAUSTED;
    }
    total += len[i];
  }
  /* 2. Pointers and memory kinds. */
  if (a->header_len > 0 && a->header == NULL) {
    ferry_error_printf(err, "uds: header is NULL but header_len is %llu",
                       (unsigned long long)a->header_len);
    return FERRY_INVALID_ARGUMENT;
  }
  for (i = 0; i < a->num_segments; i++) {
    const ferry_segment_t* seg =
        FERRY_ELEMENT_AT(const ferry_segment_t, a->segments, a->segment_stride, i);
    if ((len[i] > 0 && seg->data == NULL) ||
        (FERRY_FIELD_PRESENT(seg, ferry_segment_t, device) &&
         !is_host_device(seg->device))) {
      ferry_error_printf(err, "uds: segment %u: data is NULL or not in host memory",
                         (unsigned)i);
      return FERRY_INVALID_ARGUMENT;
    }
  }
  /* 3. The connection's state. */
  if (c->state == CONN_FAILED && c->announced) return refuse_failed(c, err);
  /* 4. Post: copy what the caller may reuse on return (header, lengths). */
  meta_len = sizeof p + sizeof(uint64_t) * a->num_segments + (size_t)a->header_len;
  s = malloc(sizeof *s + meta_len);
  if (s == NULL || (s->done = event_new()) == NULL) {
    free(s);
    ferry_error_printf(err, "uds: out of memory");
    return FERRY_RESOURCE_EXHAUSTED;
  }
  s->done->ev.user_data = a->user_data;
  if (c->state == CONN_FAILED) {
    /* Posted before the host saw its failed CONNECTED: fail with that. */
    event_queue(c->ctx, s->done, FERRY_EV_SEND_DONE, c->fail_status, c, a->user_data,
                c->fail_message);
    free(s);
    return FERRY_OK;
  }
  p.magic = UDS_WIRE_MAGIC;
  p.num_segments = a->num_segments;
  p.header_len = a->header_len;
  memcpy(s->meta, &p, sizeof p);
  memcpy(s->meta + sizeof p, len, sizeof(uint64_t) * a->num_segments);
  if (a->header_len > 0)
    memcpy(s->meta + meta_len - a->header_len, a->header, a->header_len);
  s->next = NULL;
  s->iov_next = 0;
  s->iov_count = 1;
  s->iov[0].iov_base = s->meta;
  s->iov[0].iov_len = meta_len;
  for (pass = 0; pass < 2; pass++) { /* inline segments first, then the rest */
    for (i = 0; i < a->num_segments; i++) {
      const ferry_segment_t* seg =
          FERRY_ELEMENT_AT(const ferry_segment_t, a->segments, a->segment_stride, i);
      if (len[i] == 0 || is_inline(len[i]) != (pass == 0)) continue;
      s->iov[s->iov_count].iov_base = (void*)seg->data; /* sendmsg only reads it */
      s->iov[s->iov_count].iov_len = (size_t)len[i];
      s->iov_count++;
    }
  }
  if (c->send_tail != NULL)
    c->send_tail->next = s;
  else
    c->send_head = s;
  c->send_tail = s;
  conn_update_epoll(c); /* EPOLLOUT: progress() will write it */
  return FERRY_OK;
}

/* Checks that msg_id names the arrival this connection is holding. */
static ferry_status_t check_held(ferry_conn_t* c, uint64_t msg_id,
                                 ferry_error_buf_t* err) {
  if (c->state == CONN_CLOSING) {
    ferry_error_printf(err, "uds: connection is closing");
    return FERRY_FAILED_PRECONDITION;
  }
  if (c->rx_stage != RX_HELD || msg_id != c->msg_id) {
    ferry_error_printf(err, "uds: no unanswered arrival with msg_id %llu",
                       (unsigned long long)msg_id);
    return FERRY_INVALID_ARGUMENT;
  }
  return FERRY_OK;
}

static ferry_status_t uds_place(ferry_conn_t* c, const ferry_place_args_t* a,
                                ferry_error_buf_t* err) {
  ferry_status_t st;
  uds_event_t* done;
  uint32_t i;
  if (a == NULL || !FERRY_FIELD_PRESENT(a, ferry_place_args_t, user_data)) {
    ferry_error_printf(err, "uds: place needs a ferry_place_args_t");
    return FERRY_INVALID_ARGUMENT;
  }
  if ((st = check_held(c, a->msg_id, err)) != FERRY_OK) return st;
  if (a->num_dests != c->rx_nseg ||
      (c->rx_nseg > 0 &&
       (a->dests == NULL ||
        a->dest_stride < FERRY_STRUCT_SIZE(ferry_place_dest_t, capacity)))) {
    ferry_error_printf(err, "uds: place gave %u destinations for %u segments",
                       (unsigned)a->num_dests, (unsigned)c->rx_nseg);
    return FERRY_INVALID_ARGUMENT;
  }
  for (i = 0; i < c->rx_nseg; i++) { /* check everything before changing anything */
    const ferry_place_dest_t* d =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, a->dests, a->dest_stride, i);
    if (is_inline(c->rx_len[i]) || d->data == NULL) continue; /* host copies / drop */
    if (d->capacity < c->rx_len[i] ||
        (FERRY_FIELD_PRESENT(d, ferry_place_dest_t, device) &&
         !is_host_device(d->device))) {
      ferry_error_printf(err,
                         "uds: destination %u holds %llu bytes (segment has %llu)"
                         " or is not host memory",
                         (unsigned)i, (unsigned long long)d->capacity,
                         (unsigned long long)c->rx_len[i]);
      return FERRY_INVALID_ARGUMENT;
    }
  }
  if (c->state == CONN_FAILED && rx_payload_bytes(c) > 0) return refuse_failed(c, err);
  if ((done = event_new()) == NULL) {
    ferry_error_printf(err, "uds: out of memory");
    return FERRY_RESOURCE_EXHAUSTED;
  }
  done->ev.user_data = a->user_data;
  for (i = 0; i < c->rx_nseg; i++)
    c->rx_dest[i] =
        FERRY_ELEMENT_AT(const ferry_place_dest_t, a->dests, a->dest_stride, i)->data;
  c->rx_place_ev = done;
  c->rx_cur = 0;
  c->rx_done = 0;
  c->rx_stage = RX_PAYLOAD;
  /* Nothing left to read (all inline)? Then it is done now: queue PLACE_DONE. */
  if (rx_payload_bytes(c) == 0) rx_payload_done(c);
  conn_update_epoll(c);
  return FERRY_OK;
}

static ferry_status_t uds_discard(ferry_conn_t* c, uint64_t msg_id,
                                  ferry_error_buf_t* err) {
  ferry_status_t st = check_held(c, msg_id, err);
  uint32_t i;
  if (st != FERRY_OK) return st;
  if (rx_payload_bytes(c) == 0 || c->state == CONN_FAILED) {
    rx_reset(c);
  } else { /* skip the remaining bytes in progress(); no event */
    for (i = 0; i < c->rx_nseg; i++) c->rx_dest[i] = NULL;
    c->rx_place_ev = NULL;
    c->rx_cur = 0;
    c->rx_done = 0;
    c->rx_stage = RX_PAYLOAD;
  }
  conn_update_epoll(c);
  return FERRY_OK;
}

/* Starts closing: pending operations complete with CANCELLED (a broken
 * connection's have already completed with its error), then CLOSED. */
static void uds_close(ferry_conn_t* c) {
  ferry_context_t* ctx = c->ctx;
  uds_event_t **link = &ctx->q_head, *prev = NULL;
  if (c->state == CONN_CLOSING) return;
  close_fd(ctx, &c->fd);
  c->epoll_mask = 0;
  /* Events the host has not seen yet: an ARRIVAL it can no longer answer is
   * dropped; a CONNECTED that reported success becomes CANCELLED. */
  while (*link != NULL) {
    uds_event_t* e = *link;
    if (e->ev.conn == c && e->ev.type == FERRY_EV_ARRIVAL) {
      *link = e->next;
      if (ctx->q_tail == e) ctx->q_tail = prev;
      free(e);
      continue;
    }
    if (e->ev.conn == c && e->ev.type == FERRY_EV_CONNECTED && e->ev.status == FERRY_OK) {
      e->ev.status = FERRY_CANCELLED;
      snprintf(e->message, sizeof e->message, "uds: connection closed by the host");
      e->ev.message = e->message;
    }
    prev = e;
    link = &e->next;
  }
  if (c->state == CONN_OPEN)
    conn_complete_pending(c, FERRY_CANCELLED, "connection closed by the host");
  rx_reset(c);
  c->state = CONN_CLOSING;
  event_queue(ctx, c->ev_closed, FERRY_EV_CLOSED, FERRY_OK, c, NULL, NULL);
  c->ev_closed = NULL;
}

/* ---- progress(): all I/O happens here -------------------------------- */

static ferry_status_t uds_progress(ferry_context_t* ctx, ferry_progress_args_t* a) {
  struct epoll_event ready[64];
  size_t size;
  int n, i;
  if (a == NULL || !FERRY_FIELD_PRESENT(a, ferry_progress_args_t, num_events) ||
      (a->max_events > 0 &&
       (a->events == NULL || a->event_stride < FERRY_EVENT_STRUCT_SIZE)))
    return FERRY_INVALID_ARGUMENT;
  a->num_events = 0;
  event_free_list(ctx->retired); /* their messages were valid until now */
  ctx->retired = NULL;

  /* 1. Socket I/O for whatever epoll says is ready (timeout 0: never block). */
  n = epoll_wait(ctx->epfd, ready, (int)(sizeof ready / sizeof ready[0]), 0);
  for (i = 0; i < n; i++) {
    int* kind = ready[i].data.ptr;
    if (kind == NULL) continue; /* the eventfd: handled below */
    if (*kind == OBJ_LISTENER) {
      listener_accept((ferry_listener_t*)kind);
    } else {
      ferry_conn_t* c = (ferry_conn_t*)kind;
      conn_flush(c); /* a hang-up shows up as EPIPE or EOF: both paths look */
      conn_read(c);
      if (c->state == CONN_OPEN && c->rx_stage == RX_HELD &&
          (ready[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        conn_check_hangup(c);
      conn_update_epoll(c);
    }
  }

  /* 2. Return queued events, writing at most the host's event size. */
  size = a->event_stride < sizeof(ferry_event_t) ? (size_t)a->event_stride
                                                 : sizeof(ferry_event_t);
  while (a->num_events < a->max_events && ctx->q_head != NULL) {
    uds_event_t* e = ctx->q_head;
    ferry_conn_t* c = e->ev.conn;
    ctx->q_head = e->next;
    if (ctx->q_head == NULL) ctx->q_tail = NULL;
    if (c != NULL) e->ev.conn_user_data = c->user_data; /* the latest value */
    e->ev.struct_size = (uint32_t)size;
    memcpy(FERRY_ELEMENT_AT(ferry_event_t, a->events, a->event_stride, a->num_events),
           &e->ev, size);
    a->num_events++;
    e->next = ctx->retired;
    ctx->retired = e;
    if (e->ev.type == FERRY_EV_CONNECTED || e->ev.type == FERRY_EV_ACCEPTED) {
      c->announced = 1; /* now reading is allowed */
      conn_update_epoll(c);
    } else if (e->ev.type == FERRY_EV_CLOSED) {
      conn_free(c); /* the handle is invalid from here on */
    }
  }

  /* 3. The wakeup fd stays readable exactly while events are left. */
  if (ctx->q_head == NULL && ctx->woken) {
    uint64_t v;
    if (read(ctx->evfd, &v, sizeof v) == (ssize_t)sizeof v) ctx->woken = 0;
  }
  return FERRY_OK;
}

/* ---- Context --------------------------------------------------------- */

/* Reads the plugin parameter `key` (ferry settings, or FERRY_UDS_<KEY>).
 * Returns 0 when it is unset or empty. */
static int get_param(const char* key, char* buf, size_t len) {
  return g_host != NULL &&
         FERRY_FIELD_PRESENT(g_host, ferry_host_services_t, get_param) &&
         g_host->get_param != NULL &&
         g_host->get_param(g_host->host_ctx, UDS_NAME, key, buf, len) > 0;
}

/* Copies the first line of a small file; "" if unreadable. */
static void read_line(const char* path, char* buf, size_t len) {
  FILE* f = fopen(path, "r");
  buf[0] = '\0';
  if (f == NULL) return;
  if (fgets(buf, (int)len, f) == NULL) buf[0] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  fclose(f);
}

static ferry_status_t uds_init(const ferry_init_args_t* args, ferry_context_t** out,
                               ferry_error_buf_t* err) {
  struct epoll_event ev;
  char boot[64], mnt[64];
  const char* ns;
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  ssize_t m;
  ferry_context_t* ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL || out == NULL) {
    free(ctx);
    ferry_error_printf(err, "uds: out of memory");
    return FERRY_RESOURCE_EXHAUSTED;
  }
  ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
  ctx->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.ptr = NULL;
  if (ctx->epfd < 0 || ctx->evfd < 0 ||
      epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->evfd, &ev) != 0) {
    ferry_error_printf(err, "uds: epoll/eventfd: %s", strerror(errno));
    if (ctx->epfd >= 0) close(ctx->epfd);
    if (ctx->evfd >= 0) close(ctx->evfd);
    free(ctx);
    return FERRY_UNAVAILABLE;
  }
  if (!get_param("dir", ctx->dir, sizeof ctx->dir))
    snprintf(ctx->dir, sizeof ctx->dir, "%s/ferry-uds-%u",
             xdg != NULL && xdg[0] == '/' ? xdg : "/tmp", (unsigned)geteuid());
  /* Two contexts can talk iff they see the same file system: same boot and
   * same mount namespace. "domain" overrides it (tests play two hosts). */
  if (!get_param("domain", ctx->domain, sizeof ctx->domain)) {
    read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    m = readlink("/proc/self/ns/mnt", mnt, sizeof mnt - 1); /* "mnt:[4026531841]" */
    mnt[m > 0 ? m : 0] = '\0';
    ns = strchr(mnt, '[') != NULL ? strchr(mnt, '[') + 1 : mnt;
    snprintf(ctx->domain, sizeof ctx->domain, "host=%s;mnt=%.*s", boot,
             (int)strcspn(ns, "]"), ns);
  }
  snprintf(ctx->description, sizeof ctx->description,
           "Unix domain sockets, the example C plugin (sockets in %s)", ctx->dir);
  LOG(FERRY_LOG_DEBUG, "context %s: %s",
      args != NULL && args->instance ? args->instance : "", ctx->description);
  *out = ctx;
  return FERRY_OK;
}

static ferry_status_t uds_query(ferry_context_t* ctx, ferry_context_info_t* info) {
  ferry_context_info_t mine;
  size_t size;
  if (info == NULL) return FERRY_INVALID_ARGUMENT;
  memset(&mine, 0, sizeof mine);
  mine.max_header_size = UDS_MAX_HEADER;
  mine.caps = FERRY_CAP_WAKEUP_FD | FERRY_CAP_DETECTS_PEER_DEATH | FERRY_CAP_ORDERED;
  mine.memory_kinds = FERRY_MEM_HOST;
  mine.max_message_size = UDS_MAX_MESSAGE;
  mine.max_inline_size = UDS_MAX_INLINE;
  mine.max_segments = UDS_MAX_SEGMENTS;
  mine.wakeup_fd = ctx->epfd;
  mine.priority = UDS_PRIORITY;
  mine.domain = ctx->domain;
  mine.description = ctx->description;
  /* Write only inside the smaller of both struct sizes, and say which. */
  size = info->struct_size < sizeof mine ? info->struct_size : sizeof mine;
  mine.struct_size = (uint32_t)size;
  memcpy(info, &mine, size);
  return FERRY_OK;
}

/* The host may fini() with listeners and connections still open, sends and
 * a placement in flight (transport.h, fini): release all of it, queue no
 * event, and touch no host buffer once this returns. */
static void uds_fini(ferry_context_t* ctx) {
  while (ctx->listeners != NULL) uds_close_listener(ctx->listeners);
  while (ctx->conns != NULL) conn_free(ctx->conns);
  event_free_list(ctx->q_head);
  event_free_list(ctx->retired);
  close(ctx->evfd);
  close(ctx->epfd);
  free(ctx);
}

/* ---- The vtable and the one exported symbol -------------------------- */

/* Optional entries left out (NULL, or past struct_size, reads as unsupported):
 * reg/dereg (sockets gain nothing from registration) and conn_peer_address. */
static const ferry_transport_vtable_t uds_vtable = {
    .struct_size = FERRY_TRANSPORT_VTABLE_STRUCT_SIZE,
    .init = uds_init,
    .fini = uds_fini,
    .query = uds_query,
    .progress = uds_progress,
    .listen = uds_listen,
    .listener_address = uds_listener_address,
    .close_listener = uds_close_listener,
    .connect = uds_connect,
    .set_conn_user_data = uds_set_conn_user_data,
    .send = uds_send,
    .place = uds_place,
    .discard = uds_discard,
    .close = uds_close,
};

FERRY_TRANSPORT_EXPORT ferry_status_t
ferry_transport_negotiate(ferry_negotiate_args_t* args) {
  ferry_status_t st =
      ferry_plugin_negotiate(args, UDS_NAME, UDS_VERSION, UDS_ABI_MINOR_MIN,
                             UDS_ABI_MINOR_MAX, FERRY_FEATURE_MULTI_CONTEXT, &uds_vtable);
  if (st == FERRY_OK) g_host = args->host;
  return st;
}
