// The completion contract, enforced on every operation the suite posts
// (TensorPipe's transport_test idea, adapted to a progress()-based C ABI):
//
//  * exactly once: each posted operation gets a unique user_data cookie;
//    a second completion for it, a completion for a cookie never posted or
//    refused, and (at teardown or CLOSED) a missing completion all fail;
//  * never inline: the cookie is in state "posting" for the whole duration
//    of the call that posts it. The suite only returns events from
//    progress(), which it calls after the post returned, so an event for a
//    cookie still "posting" means a completion was produced synchronously.
//    With a thread-safe plugin another thread's progress() may legitimately
//    complete an operation before its post returns, so concurrency tests turn
//    that check off (SetConcurrent) and run it single-threaded elsewhere;
//  * refused means nothing: a post that returned a status other than OK
//    posted nothing, so its cookie must never complete.
//
// Violations are reported with ADD_FAILURE at once, naming the invariant
// (INV-n, see docs/conformance.md) so a plugin author knows which rule broke.
#pragma once

#include <ferry/transport.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry::conformance {

enum class OpKind { kConnect, kSend, kPlace };
const char* OpKindName(OpKind kind);

class CookieTracker {
 public:
  // A fresh cookie in state "posting"; pass it as the operation's user_data.
  void* Begin(OpKind kind, ferry_conn_t* conn);
  // The post returned FERRY_OK: the cookie now awaits exactly one completion.
  // `conn` updates the connection (connect() only learns it on return).
  void Posted(void* cookie, ferry_conn_t* conn = nullptr);
  // The post was refused: the cookie must never complete.
  void Refused(void* cookie);

  // A completion event (CONNECTED, SEND_DONE, PLACE_DONE) for `cookie`.
  void OnCompletion(int32_t event_type, void* cookie, ferry_conn_t* conn,
                    ferry_status_t status, const std::string& message);

  bool Done(void* cookie) const;
  ferry_status_t StatusOf(void* cookie) const;
  std::string MessageOf(void* cookie) const;
  // Posted operations on `conn` (nullptr: all) that have not completed yet.
  // Operations not completed yet. `include_posting` false leaves out posts
  // whose call has not returned: with threads posting, such a call may still
  // be refused, so it is not (yet) an operation the plugin owes a completion.
  size_t Pending(ferry_conn_t* conn = nullptr, bool include_posting = true) const;
  std::vector<std::string> DescribePending(ferry_conn_t* conn = nullptr,
                                           bool include_posting = true) const;
  // Forget completed cookies (a long test keeps the map small).
  void ForgetCompleted();
  // The operations on `conn` still owed a completion are given up: the
  // host fini()ed the context with them in flight, which completes nothing.
  // A completion for one of them afterwards still fails (INV-1).
  void Abandon(ferry_conn_t* conn);

  // Allows a completion while its post is still in flight (another thread
  // progresses). Exactly-once is still enforced.
  void SetConcurrent(bool concurrent);

 private:
  enum class State { kPosting, kPending, kRefused, kDone };
  struct Record {
    OpKind kind = OpKind::kSend;
    State state = State::kPosting;
    ferry_conn_t* conn = nullptr;
    ferry_status_t status = FERRY_OK;
    std::string message;
  };
  mutable std::mutex mu_;
  uint64_t next_id_ = 1;
  bool concurrent_ = false;
  std::unordered_map<void*, Record> records_;
};

}  // namespace ferry::conformance
