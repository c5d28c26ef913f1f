// The event pump: the only place the suite calls progress(). It drives one
// or more contexts until a condition holds or a deadline passes (no sleeps:
// it blocks on the contexts' wakeup fds when they all have one, and spins
// otherwise), and checks every event against the ABI's rules as it passes:
//
//   INV-1..3  completions, through the CookieTracker (exactly once, never
//             inline, refused posts stay silent);
//   INV-4     an event whose status is not FERRY_OK has a non-empty message;
//   INV-5     per connection: CONN_BROKEN at most once, CLOSED only after the
//             host's close(), once, last, and only when every operation on
//             the connection has completed;
//   INV-6     event fields are sane (known type, struct_size within the
//             stride, conn set, conn_user_data is the value the host set
//             last);
//   INV-7     arrivals: only between CONNECTED/ACCEPTED and close(), msg_id
//             unique while unanswered, descriptors present.
//
// Arrivals go to a per-connection handler when one is set (the Inbox), other
// non-completion events are queued for the test to Take().
#pragma once

#include "harness/cookie_tracker.h"
#include "harness/util.h"
#include "testkit/event.h"
#include "transport/transport.h"

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ferry::conformance {

using testkit::SegmentView;

// A ferry_event_t as the plugin wrote it (testkit/event.h: the message is
// copied; for ARRIVAL the header and inline bytes are still the plugin's,
// borrowed until the arrival is answered), and the context it came from.
struct Event : testkit::EventView {
  Transport* transport = nullptr;
};

inline std::string Describe(const Event& event) {
  return testkit::Describe(event);
}

class EventPump {
 public:
  explicit EventPump(CookieTracker* tracker) : tracker_(tracker) {}

  void Add(Transport* transport);
  void Remove(Transport* transport);

  // Events returned per progress() call (1 stresses "nothing is lost when
  // the host's array is small").
  void SetMaxEvents(uint32_t max_events) { max_events_ = max_events; }
  // ABI-2: call the vtable's progress() directly with a larger args struct
  // and events strided `extra` bytes apart, canaries in every gap.
  void SetEventPadding(size_t extra) { padding_ = extra; }

  // One progress() on every context; returns the number of events.
  // Called by one thread at a time.
  size_t PollOnce();
  // One progress() on `transport` alone, returning at most `max_events`.
  size_t PollTransport(Transport* transport, uint32_t max_events);
  // Progresses until done() or the timeout; on timeout adds a failure that
  // names `what`, the pending operations and the last events, and returns
  // false.
  bool RunUntil(const std::function<bool()>& done, milliseconds timeout,
                const std::string& what);
  // Same, without a failure on timeout (for "must not happen" windows and
  // best-effort drains).
  bool RunQuietlyUntil(const std::function<bool()>& done, milliseconds timeout);
  // `rounds` progress() calls: a bounded chance for something to happen.
  void Churn(int rounds);

  // ---- connections: the host side of each conn's life ----
  void NoteConnect(Transport* transport, ferry_conn_t* conn, void* user_data);
  void NoteConnUserData(ferry_conn_t* conn, void* user_data);
  void NoteClose(ferry_conn_t* conn);
  void NoteAnswered(ferry_conn_t* conn, uint64_t msg_id);
  Transport* TransportOf(ferry_conn_t* conn) const;
  bool IsClosed(ferry_conn_t* conn) const;  // CLOSED returned
  bool CloseCalled(ferry_conn_t* conn) const;
  bool IsBroken(ferry_conn_t* conn) const;  // CONN_BROKEN returned
  ferry_status_t BrokenStatus(ferry_conn_t* conn) const;
  // Connections the host has not close()d yet.
  std::vector<ferry_conn_t*> UnclosedConns() const;
  // Connections of `transport` whose CLOSED has not been returned.
  std::vector<ferry_conn_t*> LiveConnsOf(Transport* transport) const;
  // Connections close()d whose CLOSED has not been returned.
  std::vector<ferry_conn_t*> ClosingConns() const;
  std::vector<uint64_t> UnansweredArrivals(ferry_conn_t* conn) const;

  // ---- arrivals and queued events ----
  using ArrivalHandler = std::function<void(const Event&)>;
  void SetArrivalHandler(ferry_conn_t* conn, ArrivalHandler handler);
  void ClearArrivalHandler(ferry_conn_t* conn);
  std::optional<Event> Take(const std::function<bool(const Event&)>& match);
  bool HasQueued(const std::function<bool(const Event&)>& match) const;
  size_t CountQueued(const std::function<bool(const Event&)>& match) const;

  // The last events seen, one per line, for failure messages.
  std::string RecentEvents() const;
  uint64_t events_seen() const;

 private:
  struct ConnState {
    Transport* transport = nullptr;
    void* user_data = nullptr;  // what conn_user_data must be right now
    bool announced = false;     // its CONNECTED / ACCEPTED was returned
    bool close_called = false;
    bool closed = false;
    int broken = 0;
    ferry_status_t broken_status = FERRY_OK;
    std::set<uint64_t> unanswered;
  };

  size_t Progress(Transport* transport, std::vector<Event>* out);
  bool ParseEvent(Transport* transport, const ferry_event_t* raw, size_t stride,
                  Event* out);
  // Checks INV-4..7 and updates connection state; returns false when the
  // event must not be dispatched further.
  void Check(Event* event);
  void Dispatch(Event event);
  bool WaitForWork();

  CookieTracker* tracker_;
  uint32_t max_events_ = 32;
  size_t padding_ = 0;
  std::vector<Transport*> transports_;
  std::vector<ferry_event_t> events_;
  std::vector<unsigned char> padded_;

  mutable std::mutex mu_;  // everything below: tests read from other threads
  std::map<ferry_conn_t*, ConnState> conns_;
  // Handles that an ACCEPTED reused after their connection's CLOSED.
  std::set<ferry_conn_t*> reused_after_close_;
  std::map<ferry_conn_t*, ArrivalHandler> handlers_;
  std::deque<Event> queue_;
  std::deque<std::string> recent_;
  uint64_t events_seen_ = 0;
};

}  // namespace ferry::conformance
