#include "harness/conformance_test.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace ferry::conformance {
namespace {

std::atomic<int> g_sigpipes{0};

void OnSigpipe(int) {
  g_sigpipes.fetch_add(1);
}

uint64_t SegmentSeed(uint64_t seed, size_t index) {
  return seed * 1000003ULL + index + 1;
}

}  // namespace

void InstallSigpipeWatch() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSigpipe;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPIPE, &sa, nullptr);
}

uint64_t OutMessage::TotalSize() const {
  uint64_t total = header.size();
  for (const auto& s : segments) total += s.size();
  return total;
}

// ---------------------------------------------------------------------------
// Inbox

Inbox::Inbox(ConformanceTest* test, ferry_conn_t* conn, Options options)
    : test_(test), conn_(conn), options_(std::move(options)) {
  test_->pump().SetArrivalHandler(conn_, [this](const Event& e) { OnArrival(e); });
}

void Inbox::OnArrival(const Event& e) {
  messages_.emplace_back();
  InMessage& m = messages_.back();
  m.msg_id = e.msg_id;
  // Header and inline bytes are borrowed only until the answer: copy first.
  if (e.header_len > 0) {
    const auto* h = static_cast<const unsigned char*>(e.header);
    m.header.assign(h, h + e.header_len);
  }
  m.segments.resize(e.segments.size());
  m.was_inline.resize(e.segments.size());
  std::vector<ferry_place_dest_t> dests(e.segments.size());
  for (size_t i = 0; i < e.segments.size(); ++i) {
    const SegmentView& s = e.segments[i];
    m.segments[i].resize(s.length);
    m.was_inline[i] = s.inline_data != nullptr;
    ferry_place_dest_t& d = dests[i];
    d.struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
    d.device = {FERRY_DEVICE_CPU, 0};
    if (s.inline_data != nullptr) {
      if (s.length > 0) std::memcpy(m.segments[i].data(), s.inline_data, s.length);
      // The host copies inline segments itself; NULL says "nothing to put".
    } else if (s.length > 0) {
      d.data = m.segments[i].data();
      d.capacity = s.length;
    }
  }
  if (options_.discard_if && options_.discard_if(e)) {
    m.discarded = true;
    Status st = test_->Discard(e.conn, e.msg_id);
    EXPECT_TRUE(st.ok()) << "discard(msg_id " << e.msg_id << "): " << st.ToString();
    return;
  }
  if (e.AllInline() && !options_.place_inline) {
    Status st = test_->Discard(e.conn, e.msg_id);
    EXPECT_TRUE(st.ok()) << "discard() releasing an all-inline arrival: "
                         << st.ToString();
    return;
  }
  if (options_.adjust) options_.adjust(e, &dests);
  Status st = test_->Place(e.conn, e.msg_id, dests, &m.place_cookie);
  EXPECT_TRUE(st.ok()) << "place(msg_id " << e.msg_id << ", " << e.segments.size()
                       << " dests): " << st.ToString();
  if (!st.ok()) m.place_cookie = nullptr;
}

size_t Inbox::arrived() const {
  return messages_.size();
}

size_t Inbox::complete() const {
  size_t n = 0;
  for (const InMessage& m : messages_) {
    if (m.discarded) continue;
    if (m.place_cookie == nullptr ||
        (test_->tracker().Done(m.place_cookie) &&
         test_->tracker().StatusOf(m.place_cookie) == FERRY_OK)) {
      ++n;
    }
  }
  return n;
}

size_t Inbox::settled() const {
  size_t n = 0;
  for (const InMessage& m : messages_) {
    if (m.place_cookie == nullptr || test_->tracker().Done(m.place_cookie)) ++n;
  }
  return n;
}

// ---------------------------------------------------------------------------
// Setup and teardown

const PluginCase& ConformanceTest::plugin_case() const {
  return PluginCases().at(GetParam().index);
}

const std::shared_ptr<const Plugin>& ConformanceTest::plugin() const {
  return plugin_case().plugin;
}

bool ConformanceTest::multi_context() const {
  return plugin() && (plugin()->features() & FERRY_FEATURE_MULTI_CONTEXT) != 0;
}

void ConformanceTest::SetUp() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  RecordProperty("plugin", plugin_case().label);
  requirement_ = FindRequirement(info->test_suite_name(), info->name());
  if (requirement_ == nullptr) {
    GTEST_FAIL() << "harness bug: " << info->test_suite_name() << "." << info->name()
                 << " has no requirement id in conformance/harness/requirements.cc";
  }
  RecordProperty("requirement", requirement_->id);
  g_sigpipes.store(0);
  if (!plugin()) {
    if (std::string(requirement_->id) == "LOAD-1") return;  // it reports why
    FERRY_NOT_RUN("the plugin did not load (see LOAD-1)");
  }
  if (!requirement_->needs_context) return;
  a_ = OpenContext(0, "conformance-a");
  if (a_ != nullptr) b_ = multi_context() ? OpenContext(0, "conformance-b") : a_;
  // OpenContext's failure is non-fatal; the body must not run without both.
  if ((a_ == nullptr || b_ == nullptr) && !IsSkipped()) {
    GTEST_FAIL() << "the test needs a context and none could be opened (see above)";
  }
}

void ConformanceTest::TearDown() {
  // Answer what is unanswered and close what is open, as a host would at
  // shutdown; then every connection must reach CLOSED and every operation
  // must have completed (INV-1, INV-5).
  for (ferry_conn_t* conn : pump_.UnclosedConns()) {
    pump_.ClearArrivalHandler(conn);
    for (uint64_t msg_id : pump_.UnansweredArrivals(conn)) Discard(conn, msg_id);
    CloseConn(conn);
  }
  for (auto& [listener, record] : listeners_) {
    record.t->CloseListener(listener);
  }
  listeners_.clear();
  if (!pump_.RunQuietlyUntil([&] { return pump_.ClosingConns().empty(); }, kOpTimeout)) {
    ADD_FAILURE() << "INV-5: " << pump_.ClosingConns().size()
                  << " connection(s) close()d at teardown never returned "
                     "FERRY_EV_CLOSED within 10 s\n  last events:\n"
                  << pump_.RecentEvents();
  } else if (size_t pending = tracker_.Pending(); pending > 0) {
    std::string list;
    for (const std::string& p : tracker_.DescribePending()) list += "\n    " + p;
    ADD_FAILURE() << "INV-1 (exactly once): " << pending
                  << " operation(s) never completed although every "
                     "connection is closed:"
                  << list;
  }
  // A peer may still be talking to us: stop it before the contexts go.
  for (auto& peer : peers_) peer->Kill();
  while (!transports_.empty()) {
    pump_.Remove(transports_.back().get());
    transports_.pop_back();  // fini()
  }
  peers_.clear();
  inboxes_.clear();
  messages_.clear();
  if (int n = g_sigpipes.exchange(0); n > 0) {
    ADD_FAILURE() << "the plugin raised SIGPIPE " << n
                  << " time(s): writing to a closed socket must use "
                     "MSG_NOSIGNAL (or SO_NOSIGPIPE), or it kills a host "
                     "that does not ignore SIGPIPE";
  }
}

Transport* ConformanceTest::OpenContext(uint32_t flags, const std::string& instance) {
  auto opened = Transport::Open(plugin(), flags, instance);
  if (!opened.ok()) {
    if (opened.status().code() == FERRY_UNAVAILABLE) {
      [&] {
        FERRY_NOT_RUN("init() says the transport cannot run here: " +
                      opened.status().ToString());
      }();
    } else {
      ADD_FAILURE() << "Transport::Open (init + query) failed: "
                    << opened.status().ToString();
    }
    return nullptr;
  }
  transports_.push_back(std::move(opened.value()));
  Transport* t = transports_.back().get();
  pump_.Add(t);
  return t;
}

void ConformanceTest::FinishContext(Transport* t) {
  for (ferry_conn_t* conn : pump_.UnclosedConns()) {
    if (pump_.TransportOf(conn) != t) continue;
    pump_.ClearArrivalHandler(conn);
    for (uint64_t msg_id : pump_.UnansweredArrivals(conn)) Discard(conn, msg_id);
    CloseConn(conn);
  }
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (it->second.t == t) {
      t->CloseListener(it->first);
      it = listeners_.erase(it);
    } else {
      ++it;
    }
  }
  pump_.RunUntil(
      [&] {
        for (ferry_conn_t* c : pump_.ClosingConns()) {
          if (pump_.TransportOf(c) == t) return false;
        }
        return true;
      },
      kOpTimeout, "CLOSED for every connection of a context being finished");
  pump_.Remove(t);
  for (auto it = transports_.begin(); it != transports_.end(); ++it) {
    if (it->get() == t) {
      transports_.erase(it);  // fini()
      break;
    }
  }
  if (a_ == t) a_ = nullptr;
  if (b_ == t) b_ = nullptr;
}

void ConformanceTest::AbandonContext(Transport* t) {
  for (ferry_conn_t* conn : pump_.LiveConnsOf(t)) tracker_.Abandon(conn);
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    it = it->second.t == t ? listeners_.erase(it) : ++it;
  }
  pump_.Remove(t);
  for (auto it = transports_.begin(); it != transports_.end(); ++it) {
    if (it->get() == t) {
      transports_.erase(it);  // fini()
      break;
    }
  }
  if (a_ == t) a_ = nullptr;
  if (b_ == t) b_ = nullptr;
}

// ---------------------------------------------------------------------------
// Listeners and connections

void ConformanceTest::ExpectPrompt(Clock::time_point start, const std::string& call) {
  const int64_t ms = ElapsedMs(start);
  EXPECT_LT(ms, kCallBound.count())
      << "LIFE-4 (calls never block): " << call << " took " << ms
      << " ms; calls must return at once and finish the work in progress()";
}

ferry_listener_t* ConformanceTest::Listen(Transport* t, std::string* address) {
  void* token = reinterpret_cast<void*>((next_token_++ << 4) | 0x8);
  ferry_listener_t* listener = nullptr;
  auto start = Clock::now();
  Status s = t->Listen("", token, &listener);
  ExpectPrompt(start, "listen(\"\")");
  if (!s.ok()) {
    ADD_FAILURE() << "listen(\"\") failed: " << s.ToString();
    return nullptr;
  }
  if (listener == nullptr) {
    ADD_FAILURE() << "listen() returned OK and a NULL listener";
    return nullptr;
  }
  listeners_[listener] = ListenerRecord{t, token};
  auto addr = t->ListenerAddress(listener);
  if (!addr.ok() || addr.value().empty()) {
    ADD_FAILURE() << "listener_address() failed: "
                  << (addr.ok() ? "empty address" : addr.status().ToString());
    return nullptr;
  }
  *address = addr.value();
  return listener;
}

void ConformanceTest::CloseListener(Transport* t, ferry_listener_t* listener) {
  auto start = Clock::now();
  t->CloseListener(listener);
  ExpectPrompt(start, "close_listener()");
  listeners_.erase(listener);
}

ferry_conn_t* ConformanceTest::StartConnect(Transport* t, const std::string& address,
                                            void** cookie, Status* status) {
  *cookie = tracker_.Begin(OpKind::kConnect, nullptr);
  ferry_conn_t* conn = nullptr;
  auto start = Clock::now();
  Status s = t->Connect(address, *cookie, &conn);
  ExpectPrompt(start, "connect(\"" + address + "\")");
  if (status != nullptr) *status = s;
  if (!s.ok()) {
    tracker_.Refused(*cookie);
    return nullptr;
  }
  if (conn == nullptr) {
    ADD_FAILURE() << "connect() returned OK and a NULL conn";
    tracker_.Refused(*cookie);
    return nullptr;
  }
  tracker_.Posted(*cookie, conn);
  pump_.NoteConnect(t, conn, *cookie);
  return conn;
}

ferry_conn_t* ConformanceTest::TakeAccepted(ferry_listener_t* listener) {
  auto it = listeners_.find(listener);
  if (it == listeners_.end()) return nullptr;
  void* token = it->second.token;
  auto e = pump_.Take([&](const Event& ev) {
    return ev.type == FERRY_EV_ACCEPTED && ev.user_data == token;
  });
  return e ? e->conn : nullptr;
}

bool ConformanceTest::MakeLink(Transport* server, Transport* client, Link* link) {
  link->server_t = server;
  link->client_t = client;
  link->listener = Listen(server, &link->address);
  if (link->listener == nullptr) return false;
  void* cookie = nullptr;
  Status s;
  link->client = StartConnect(client, link->address, &cookie, &s);
  link->connect_cookie = cookie;
  if (link->client == nullptr) {
    ADD_FAILURE() << "connect(\"" << link->address
                  << "\") to a fresh listener was refused: " << s.ToString();
    return false;
  }
  if (!pump_.RunUntil(
          [&] {
            if (link->server == nullptr) link->server = TakeAccepted(link->listener);
            return link->server != nullptr && tracker_.Done(cookie);
          },
          kOpTimeout, "CONNECTED and ACCEPTED for a new connection")) {
    return false;
  }
  if (tracker_.StatusOf(cookie) != FERRY_OK) {
    ADD_FAILURE() << "connect to a live listener completed with "
                  << StatusText(tracker_.StatusOf(cookie)) << ": "
                  << tracker_.MessageOf(cookie);
    return false;
  }
  return true;
}

void ConformanceTest::CloseConn(ferry_conn_t* conn) {
  Transport* t = pump_.TransportOf(conn);
  if (t == nullptr || pump_.CloseCalled(conn)) return;
  pump_.NoteClose(conn);
  auto start = Clock::now();
  t->Close(conn);
  ExpectPrompt(start, "close()");
}

bool ConformanceTest::WaitClosed(ferry_conn_t* conn, milliseconds timeout) {
  return pump_.RunUntil([&] { return pump_.IsClosed(conn); }, timeout,
                        "FERRY_EV_CLOSED after close()");
}

// ---------------------------------------------------------------------------
// Messages

OutMessage* ConformanceTest::NewMessage(uint64_t seed, size_t header_len,
                                        const std::vector<size_t>& sizes) {
  messages_.emplace_back();
  OutMessage& m = messages_.back();
  m.header.resize(header_len);
  FillPattern(m.header.data(), header_len, SegmentSeed(seed, 999));
  for (size_t i = 0; i < sizes.size(); ++i) {
    m.segments.emplace_back(sizes[i]);
    FillPattern(m.segments.back().data(), sizes[i], SegmentSeed(seed, i));
  }
  return &m;
}

Status ConformanceTest::TrySend(ferry_conn_t* conn, const OutMessage& m, void** cookie) {
  Transport* t = pump_.TransportOf(conn);
  std::vector<ferry_segment_t> segs(m.segments.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    segs[i].struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    segs[i].data = m.segments[i].data();
    segs[i].length = m.segments[i].size();
    segs[i].device = {FERRY_DEVICE_CPU, 0};
  }
  ferry_send_args_t args{};
  args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
  args.num_segments = static_cast<uint32_t>(segs.size());
  args.header = m.header.data();
  args.header_len = m.header.size();
  args.segments = segs.data();
  args.segment_stride = sizeof(ferry_segment_t);
  *cookie = tracker_.Begin(OpKind::kSend, conn);
  args.user_data = *cookie;
  auto start = Clock::now();
  Status s = t->Send(conn, args);
  ExpectPrompt(start, "send() of " + Bytes(m.TotalSize()));
  if (s.ok()) {
    tracker_.Posted(*cookie);
  } else {
    tracker_.Refused(*cookie);
  }
  return s;
}

void* ConformanceTest::Send(ferry_conn_t* conn, const OutMessage& m) {
  const auto deadline = Clock::now() + kOpTimeout;
  while (true) {
    void* cookie = nullptr;
    Status s = TrySend(conn, m, &cookie);
    if (s.ok()) return cookie;
    if (s.code() != FERRY_UNAVAILABLE) {
      ADD_FAILURE() << "send() of a valid " << Bytes(m.TotalSize())
                    << " message was refused: " << s.ToString();
      return nullptr;
    }
    if (Clock::now() >= deadline) {
      ADD_FAILURE() << "send() kept returning FERRY_UNAVAILABLE for 10 s "
                       "although progress() was called between attempts";
      return nullptr;
    }
    if (pump_.PollOnce() == 0) std::this_thread::yield();
  }
}

bool ConformanceTest::WaitDone(void* cookie, const std::string& what,
                               milliseconds timeout) {
  return pump_.RunUntil([&] { return tracker_.Done(cookie); }, timeout, what);
}

bool ConformanceTest::WaitOk(void* cookie, const std::string& what,
                             milliseconds timeout) {
  if (!WaitDone(cookie, what, timeout)) return false;
  if (tracker_.StatusOf(cookie) != FERRY_OK) {
    ADD_FAILURE() << what << " completed with " << StatusText(tracker_.StatusOf(cookie))
                  << ": " << tracker_.MessageOf(cookie);
    return false;
  }
  return true;
}

Status ConformanceTest::Place(ferry_conn_t* conn, uint64_t msg_id,
                              const std::vector<ferry_place_dest_t>& dests,
                              void** cookie) {
  Transport* t = pump_.TransportOf(conn);
  ferry_place_args_t args{};
  args.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
  args.num_dests = static_cast<uint32_t>(dests.size());
  args.msg_id = msg_id;
  args.dests = dests.data();
  args.dest_stride = sizeof(ferry_place_dest_t);
  *cookie = tracker_.Begin(OpKind::kPlace, conn);
  args.user_data = *cookie;
  Status s = t->Place(conn, args);
  if (s.ok()) {
    tracker_.Posted(*cookie);
    pump_.NoteAnswered(conn, msg_id);
  } else {
    tracker_.Refused(*cookie);
  }
  return s;
}

Status ConformanceTest::Discard(ferry_conn_t* conn, uint64_t msg_id) {
  Transport* t = pump_.TransportOf(conn);
  Status s = t->Discard(conn, msg_id);
  if (s.ok()) pump_.NoteAnswered(conn, msg_id);
  return s;
}

Inbox* ConformanceTest::NewInbox(ferry_conn_t* conn, Inbox::Options options) {
  inboxes_.push_back(std::make_unique<Inbox>(this, conn, std::move(options)));
  return inboxes_.back().get();
}

::testing::AssertionResult ConformanceTest::SameMessage(const OutMessage& sent,
                                                        const InMessage& got) const {
  if (sent.header != got.header) {
    size_t i = 0;
    while (i < sent.header.size() && i < got.header.size() &&
           sent.header[i] == got.header[i]) {
      ++i;
    }
    return ::testing::AssertionFailure()
           << "header differs: sent " << sent.header.size() << " B, got "
           << got.header.size() << " B, first difference at byte " << i;
  }
  if (sent.segments.size() != got.segments.size()) {
    return ::testing::AssertionFailure()
           << "sent " << sent.segments.size() << " segments, got " << got.segments.size();
  }
  for (size_t s = 0; s < sent.segments.size(); ++s) {
    const auto& a = sent.segments[s];
    const auto& b = got.segments[s];
    if (a.size() != b.size()) {
      return ::testing::AssertionFailure()
             << "segment " << s << ": sent " << Bytes(a.size()) << ", got "
             << Bytes(b.size());
    }
    if (!a.empty() && std::memcmp(a.data(), b.data(), a.size()) != 0) {
      size_t i = 0;
      while (a[i] == b[i]) ++i;
      return ::testing::AssertionFailure()
             << "segment " << s << " (" << Bytes(a.size())
             << (got.was_inline[s] ? ", inline" : ", placed")
             << ") differs first at byte " << i;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------
// Peers

PeerProcess* ConformanceTest::SpawnPeer(const std::string& mode,
                                        const std::string& address) {
  std::string error;
  auto peer =
      PeerProcess::Spawn(Options().self_exe, mode, plugin()->path(), address, &error);
  if (!peer) {
    ADD_FAILURE() << "could not start a peer process: " << error;
    return nullptr;
  }
  peers_.push_back(std::move(peer));
  return peers_.back().get();
}

bool ConformanceTest::WaitPeerSays(PeerProcess* peer, const std::string& word,
                                   milliseconds timeout) {
  std::string line;
  bool got = false;
  bool ok = pump_.RunQuietlyUntil(
      [&] {
        if (peer->TryReadLine(&line)) got = true;
        return got || peer->ChannelClosed();
      },
      timeout);
  if (!ok || !got) {
    ADD_FAILURE() << "peer process " << peer->pid() << " did not say '" << word
                  << "' within " << timeout.count() << " ms"
                  << (peer->ChannelClosed() ? " (it exited; see its stderr)" : "")
                  << "\n  last events:\n"
                  << pump_.RecentEvents();
    return false;
  }
  if (line != word) {
    ADD_FAILURE() << "peer process said '" << line << "', expected '" << word << "'";
    return false;
  }
  return true;
}

}  // namespace ferry::conformance
