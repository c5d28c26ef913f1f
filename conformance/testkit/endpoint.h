// A plugin test's view of one context: the ferry::Transport the core would
// hold, plus owned copies of the events its progress() returned that the
// test has not taken yet. Tests drive endpoints with PumpUntil (progress()
// until a condition holds or a deadline passes: never a sleep) and link two
// of them with Connect. The checks every poll makes are the test's choice
// (Options), so each plugin's tests assert what they always asserted.
#pragma once

#include "testkit/event.h"
#include "transport/transport.h"

#include <ferry/transport.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace ferry::testkit {

using Clock = std::chrono::steady_clock;

class Endpoint {
 public:
  struct Options {
    uint32_t flags = 0;  // FERRY_INIT_*
    std::string instance = "test";
    uint32_t max_events = 64;  // per progress() call
    // EXPECT that every progress() succeeds, and that every event whose
    // status is not FERRY_OK carries a message.
    bool expect_progress_ok = true;
    bool expect_event_messages = true;
  };

  // Opens a context of `plugin` (NULL: the plugin did not load); check ok(),
  // status() says why not.
  Endpoint(std::shared_ptr<const Plugin> plugin, Options options);
  explicit Endpoint(std::shared_ptr<const Plugin> plugin)
      : Endpoint(std::move(plugin), Options()) {}
  virtual ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  bool ok() const { return transport_ != nullptr; }
  const Status& status() const { return status_; }
  Transport& t() { return *transport_; }
  const Transport& t() const { return *transport_; }
  int wakeup_fd() const { return transport_->info().wakeup_fd; }

  // One progress() call; its events are appended to events(). Returns how
  // many it produced (0 after a failed progress()).
  size_t PollOnce();
  std::deque<Event>& events() { return events_; }

  // Whether / how many events of `type` (on `conn`, unless NULL) wait.
  bool Has(int32_t type, ferry_conn_t* conn = nullptr) const;
  size_t Count(int32_t type, ferry_conn_t* conn = nullptr) const;
  // Removes and returns the first such event; fails the test (and returns
  // an empty event) when there is none.
  Event Take(int32_t type, ferry_conn_t* conn = nullptr);
  // The same without failing: false when there is none.
  bool TryTake(int32_t type, Event* out, ferry_conn_t* conn = nullptr);

  // listen(address) and the listener's address; "" after a failure, which
  // is EXPECTed not to happen.
  std::string Listen(const std::string& address, ferry_listener_t** out);

 private:
  Options options_;
  std::unique_ptr<Transport> transport_;
  Status status_;
  std::vector<ferry_event_t> raw_;
  std::deque<Event> events_;
};

// Calls poll() until done() holds (true) or `timeout` passes (false). After
// a round that found nothing, idle() (when given) may wait for work.
bool PumpUntil(const std::function<size_t()>& poll, const std::function<bool()>& done,
               std::chrono::milliseconds timeout, const std::function<void()>& idle = {});

// What a pump does between idle rounds.
enum class Idle {
  kSpin,           // nothing: poll again at once
  kWaitOnWakeups,  // poll() the endpoints' wakeup fds (at most 10 ms)
};

// Polls every endpoint until done() holds; false at the deadline.
bool PumpUntil(std::initializer_list<Endpoint*> endpoints,
               const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(30),
               Idle idle = Idle::kSpin);
// Polls every endpoint for `duration` (to show that something does *not*
// happen).
void PumpFor(std::initializer_list<Endpoint*> endpoints,
             std::chrono::milliseconds duration);

// A connected pair: the client's conn (from connect()) and the server's
// (from ACCEPTED), and the listener it came through.
struct Link {
  ferry_conn_t* client = nullptr;
  ferry_conn_t* server = nullptr;
  ferry_listener_t* listener = nullptr;
  std::string address;
};
// Listens on `server` at `listen_address`, connects from `client` with
// `user_data`, and waits for CONNECTED (EXPECTed OK) and ACCEPTED; each step
// is EXPECTed to succeed. False after a failure.
bool Connect(Endpoint* client, Endpoint* server, const std::string& listen_address,
             Link* link, void* user_data = nullptr,
             std::chrono::milliseconds timeout = std::chrono::seconds(30));
// close()s both ends and EXPECTs their CLOSED; then closes the listener.
void CloseLink(Endpoint* client, Endpoint* server, const Link& link,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Builders for the ABI's argument structs. They point into their
// arguments: use them within the full expression of the call.
ferry_segment_t Segment(const void* data, uint64_t length,
                        int32_t device_type = FERRY_DEVICE_CPU);
ferry_send_args_t SendArgs(const std::string& header,
                           const std::vector<ferry_segment_t>& segments, void* user_data);
ferry_place_dest_t Dest(void* data, uint64_t capacity);
ferry_place_args_t PlaceArgs(uint64_t msg_id,
                             const std::vector<ferry_place_dest_t>& dests,
                             void* user_data);

}  // namespace ferry::testkit
