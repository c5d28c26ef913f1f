// The value-parametrized fixture every conformance test derives from. One
// instance per (test, plugin): SetUp records the requirement id and the
// plugin as gtest properties (the reports read them), opens the contexts the
// test needs, and TearDown closes whatever the test left open and checks the
// end-of-test invariants (every operation completed once, every connection
// CLOSED). Tests speak in terms of links, messages and inboxes; the raw ABI
// is used directly only where a test must craft structs itself.
#pragma once

#include "harness/cookie_tracker.h"
#include "harness/event_pump.h"
#include "harness/peer_process.h"
#include "harness/plugin_cases.h"
#include "harness/requirements.h"
#include "harness/util.h"
#include "transport/transport.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

// Marks the current test "not run" with a reason, or fails it in --strict
// mode (fabtests' strict mode). Returns from the calling function.
#define FERRY_NOT_RUN(reason)                                                      \
  do {                                                                             \
    if (::ferry::conformance::Options().strict) {                                  \
      GTEST_FAIL() << "not run, which --strict counts as a failure: " << (reason); \
    } else {                                                                       \
      GTEST_SKIP() << (reason);                                                    \
    }                                                                              \
  } while (0)

// Not run unless the context claims capability `cap` (a FERRY_CAP_* name).
#define FERRY_REQUIRE_CAP(transport, cap)               \
  do {                                                  \
    if (!(transport)->HasCap(cap)) {                    \
      FERRY_NOT_RUN("the plugin does not claim " #cap); \
    }                                                   \
  } while (0)

namespace ferry::conformance {

// A message to send. Owned by the fixture (NewMessage) so its bytes outlive
// SEND_DONE even when a test stops early.
struct OutMessage {
  std::vector<unsigned char> header;
  std::vector<std::vector<unsigned char>> segments;
  uint64_t TotalSize() const;
};

// A message as received: header and every segment's bytes.
struct InMessage {
  uint64_t msg_id = 0;
  std::vector<unsigned char> header;
  std::vector<std::vector<unsigned char>> segments;
  std::vector<bool> was_inline;
  void* place_cookie = nullptr;  // null when answered with discard()
  bool discarded = false;
};

class ConformanceTest;

// Answers every arrival on one connection the way the core does: copies the
// header and inline segments, then place()s the other segments into fresh
// buffers (or discard()s an all-inline arrival). Messages are kept in
// arrival order. Hooks let a test discard some messages or change the
// destinations.
class Inbox {
 public:
  struct Options {
    bool place_inline = false;  // answer all-inline arrivals with place()
    std::function<bool(const Event&)> discard_if;
    std::function<void(const Event&, std::vector<ferry_place_dest_t>*)> adjust;
  };
  Inbox(ConformanceTest* test, ferry_conn_t* conn, Options options);

  size_t arrived() const;
  // Messages whose bytes are all here (placement completed with OK).
  size_t complete() const;
  // Messages whose placement completed, with any status.
  size_t settled() const;
  std::deque<InMessage>& messages() { return messages_; }
  ferry_conn_t* conn() const { return conn_; }

 private:
  void OnArrival(const Event& e);
  ConformanceTest* test_;
  ferry_conn_t* conn_;
  Options options_;
  std::deque<InMessage> messages_;  // deque: element addresses stay put
};

class ConformanceTest : public ::testing::TestWithParam<PluginParam> {
 public:
  // ---- used by Inbox and tests ----
  EventPump& pump() { return pump_; }
  CookieTracker& tracker() { return tracker_; }

  // place()/discard() through ferry::Transport, with the bookkeeping: the
  // cookie is tracked, the arrival is marked answered when accepted.
  Status Place(ferry_conn_t* conn, uint64_t msg_id,
               const std::vector<ferry_place_dest_t>& dests, void** cookie);
  Status Discard(ferry_conn_t* conn, uint64_t msg_id);

 protected:
  void SetUp() override;
  void TearDown() override;

  const PluginCase& plugin_case() const;
  const std::shared_ptr<const Plugin>& plugin() const;
  const Requirement& requirement() const { return *requirement_; }

  // The contexts SetUp opened: a() always; b() is a second context when the
  // plugin declares FERRY_FEATURE_MULTI_CONTEXT, else a() again (the
  // context then talks to itself).
  Transport* a() const { return a_; }
  Transport* b() const { return b_; }
  bool multi_context() const;

  // Opens one more context through ferry::Transport::Open and adds it to the
  // pump. nullptr when it cannot (failure added; UNAVAILABLE is "not run").
  Transport* OpenContext(uint32_t flags = 0, const std::string& instance = "");
  // Closes every connection of `t`, waits for their CLOSED, fini()s it.
  void FinishContext(Transport* t);
  // fini()s `t` at once, with whatever is open on it (the core does this
  // when a shutdown's grace period ends): its listeners, connections and
  // operations are forgotten, since fini() completes nothing.
  void AbandonContext(Transport* t);

  // ---- listeners and connections ----
  // listen("") with a bounded call time; nullptr after a failure.
  ferry_listener_t* Listen(Transport* t, std::string* address);
  void CloseListener(Transport* t, ferry_listener_t* listener);
  // Posts connect(); nullptr when refused (*status says why).
  ferry_conn_t* StartConnect(Transport* t, const std::string& address, void** cookie,
                             Status* status = nullptr);
  // The next ACCEPTED for `listener`, if one is queued.
  ferry_conn_t* TakeAccepted(ferry_listener_t* listener);

  struct Link {
    Transport* server_t = nullptr;
    Transport* client_t = nullptr;
    ferry_listener_t* listener = nullptr;
    std::string address;
    ferry_conn_t* client = nullptr;  // from connect()
    ferry_conn_t* server = nullptr;  // from ACCEPTED
    void* connect_cookie = nullptr;  // connect()'s user_data
  };
  // Listens on `server`, connects from `client`, waits for CONNECTED (OK)
  // and ACCEPTED. False after a failure.
  bool MakeLink(Transport* server, Transport* client, Link* link);
  // MakeLink(a(), b()).
  bool MakeLink(Link* link) { return MakeLink(a(), b(), link); }

  // close() (bounded call time) and remember it was called.
  void CloseConn(ferry_conn_t* conn);
  bool WaitClosed(ferry_conn_t* conn, milliseconds timeout = kOpTimeout);

  // ---- messages ----
  // A fixture-owned message: header of `header_len` bytes, one segment per
  // size, every byte from a pattern derived from `seed`.
  OutMessage* NewMessage(uint64_t seed, size_t header_len,
                         const std::vector<size_t>& sizes);
  // One attempt to post `m` on `conn`; *cookie is the tracked user_data.
  Status TrySend(ferry_conn_t* conn, const OutMessage& m, void** cookie);
  // Posts `m`, progressing and retrying while the plugin says
  // FERRY_UNAVAILABLE (back-pressure). nullptr after a failure.
  void* Send(ferry_conn_t* conn, const OutMessage& m);
  // Waits for the completion of `cookie` (any status).
  bool WaitDone(void* cookie, const std::string& what, milliseconds timeout = kOpTimeout);
  // Waits for the completion and expects FERRY_OK.
  bool WaitOk(void* cookie, const std::string& what, milliseconds timeout = kOpTimeout);
  // A fixture-owned Inbox on `conn`.
  Inbox* NewInbox(ferry_conn_t* conn, Inbox::Options options = {});

  ::testing::AssertionResult SameMessage(const OutMessage& sent,
                                         const InMessage& got) const;

  // ---- peers ----
  // Spawns this binary as a peer process that connects to `address`.
  PeerProcess* SpawnPeer(const std::string& mode, const std::string& address);
  // Progresses until the peer writes `word`; false (after a failure) on
  // timeout, on "error ..." or when the peer exits first.
  bool WaitPeerSays(PeerProcess* peer, const std::string& word,
                    milliseconds timeout = kOpTimeout);

  // Fails when a call took longer than kCallBound (a hang detector).
  void ExpectPrompt(Clock::time_point start, const std::string& call);

 private:
  friend class Inbox;
  const Requirement* requirement_ = nullptr;
  CookieTracker tracker_;
  EventPump pump_{&tracker_};
  std::vector<std::unique_ptr<Transport>> transports_;
  Transport* a_ = nullptr;
  Transport* b_ = nullptr;
  struct ListenerRecord {
    Transport* t;
    void* token;
  };
  std::map<ferry_listener_t*, ListenerRecord> listeners_;
  uintptr_t next_token_ = 1;
  // Everything a plugin may still be reading or writing is kept until the
  // contexts are gone: messages, inboxes (their buffers) and peers.
  std::deque<OutMessage> messages_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  std::vector<std::unique_ptr<PeerProcess>> peers_;
};

// Installs the SIGPIPE watch (a plugin that writes to a dead socket without
// MSG_NOSIGNAL kills a host that does not ignore SIGPIPE; the suite catches
// the signal and fails the test instead of dying).
void InstallSigpipeWatch();

}  // namespace ferry::conformance
