#include "harness/cookie_tracker.h"

#include "harness/util.h"

#include <gtest/gtest.h>

namespace ferry::conformance {
namespace {

int32_t ExpectedEvent(OpKind kind) {
  switch (kind) {
    case OpKind::kConnect:
      return FERRY_EV_CONNECTED;
    case OpKind::kSend:
      return FERRY_EV_SEND_DONE;
    case OpKind::kPlace:
      return FERRY_EV_PLACE_DONE;
  }
  return 0;
}

std::string CookieName(void* cookie) {
  return "cookie #" + std::to_string(reinterpret_cast<uintptr_t>(cookie) >> 4);
}

}  // namespace

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kConnect:
      return "connect";
    case OpKind::kSend:
      return "send";
    case OpKind::kPlace:
      return "place";
  }
  return "?";
}

void* CookieTracker::Begin(OpKind kind, ferry_conn_t* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  // Cookies are never dereferenced by a plugin: an id in pointer clothing,
  // never NULL, never the address of anything.
  void* cookie = reinterpret_cast<void*>(static_cast<uintptr_t>(next_id_++) << 4);
  Record r;
  r.kind = kind;
  r.state = State::kPosting;
  r.conn = conn;
  records_[cookie] = r;
  return cookie;
}

void CookieTracker::Posted(void* cookie, ferry_conn_t* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(cookie);
  if (it == records_.end()) return;
  if (conn != nullptr) it->second.conn = conn;
  // With concurrent progress the completion may already be in.
  if (it->second.state == State::kPosting) it->second.state = State::kPending;
}

void CookieTracker::Refused(void* cookie) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(cookie);
  if (it == records_.end()) return;
  if (it->second.state == State::kDone) {
    ADD_FAILURE() << "INV-3 (a refused post produces no event): the "
                  << OpKindName(it->second.kind) << " was refused but its "
                  << CookieName(cookie) << " already completed with "
                  << StatusText(it->second.status);
  }
  it->second.state = State::kRefused;
}

void CookieTracker::OnCompletion(int32_t event_type, void* cookie, ferry_conn_t* conn,
                                 ferry_status_t status, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(cookie);
  if (it == records_.end()) {
    ADD_FAILURE() << "INV-1 (exactly once): completion event type " << event_type
                  << " carries user_data " << cookie
                  << ", which the suite never posted (or a completion for an "
                     "already forgotten operation)";
    return;
  }
  Record& r = it->second;
  if (ExpectedEvent(r.kind) != event_type) {
    ADD_FAILURE() << "INV-1: " << CookieName(cookie) << " was a " << OpKindName(r.kind)
                  << " but completed with event type " << event_type;
  }
  if (r.conn != nullptr && conn != nullptr && r.conn != conn) {
    ADD_FAILURE() << "INV-1: " << CookieName(cookie) << " was posted on conn " << r.conn
                  << " but completed on conn " << conn;
  }
  switch (r.state) {
    case State::kPosting:
      if (!concurrent_) {
        ADD_FAILURE() << "INV-2 (never inline): the " << OpKindName(r.kind) << " ("
                      << CookieName(cookie)
                      << ") completed before the call that posted it returned";
      }
      break;
    case State::kPending:
      break;
    case State::kRefused:
      ADD_FAILURE() << "INV-3 (a refused post produces no event): the "
                    << OpKindName(r.kind) << " (" << CookieName(cookie)
                    << ") was refused by the call that posted it, yet it "
                       "completed with "
                    << StatusText(status);
      return;
    case State::kDone:
      ADD_FAILURE() << "INV-1 (exactly once): the " << OpKindName(r.kind) << " ("
                    << CookieName(cookie) << ") completed twice: first "
                    << StatusText(r.status) << ", then " << StatusText(status);
      return;
  }
  r.state = State::kDone;
  r.status = status;
  r.message = message;
}

bool CookieTracker::Done(void* cookie) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(cookie);
  return it != records_.end() && it->second.state == State::kDone;
}

ferry_status_t CookieTracker::StatusOf(void* cookie) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(cookie);
  return it == records_.end() ? FERRY_UNKNOWN : it->second.status;
}

std::string CookieTracker::MessageOf(void* cookie) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(cookie);
  return it == records_.end() ? std::string() : it->second.message;
}

size_t CookieTracker::Pending(ferry_conn_t* conn, bool include_posting) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [cookie, r] : records_) {
    if ((r.state == State::kPending || (include_posting && r.state == State::kPosting)) &&
        (conn == nullptr || r.conn == conn)) {
      ++n;
    }
  }
  return n;
}

std::vector<std::string> CookieTracker::DescribePending(ferry_conn_t* conn,
                                                        bool include_posting) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [cookie, r] : records_) {
    if ((r.state == State::kPending || (include_posting && r.state == State::kPosting)) &&
        (conn == nullptr || r.conn == conn)) {
      std::ostringstream line;
      line << OpKindName(r.kind) << " " << CookieName(cookie) << " on conn " << r.conn;
      out.push_back(line.str());
    }
  }
  return out;
}

void CookieTracker::ForgetCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = records_.begin(); it != records_.end();) {
    // Refused cookies are kept: a late completion for one must still fail.
    it = it->second.state == State::kDone ? records_.erase(it) : ++it;
  }
}

void CookieTracker::Abandon(ferry_conn_t* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = records_.begin(); it != records_.end();) {
    const bool owed =
        it->second.state == State::kPending || it->second.state == State::kPosting;
    it = owed && it->second.conn == conn ? records_.erase(it) : ++it;
  }
}

void CookieTracker::SetConcurrent(bool concurrent) {
  std::lock_guard<std::mutex> lock(mu_);
  concurrent_ = concurrent;
}

}  // namespace ferry::conformance
