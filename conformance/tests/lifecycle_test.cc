// LIFE-*: contexts, listeners and connections over their whole life: many
// init/fini cycles, several plugins and contexts side by side, calls that
// must never block, many connections, close with work in flight, user data,
// and the fds a plugin leaves to child processes.
#include "harness/conformance_test.h"
#include "loader/plugin_loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <iostream>
#include <map>
#include <set>

namespace ferry::conformance {
namespace {

class LifecycleTest : public ConformanceTest {
 protected:
  // One message each way on a fresh self-link of `t`, then close.
  void ExchangeOn(Transport* t, uint64_t seed) {
    Link link;
    ASSERT_TRUE(MakeLink(t, t, &link));
    Inbox* in = NewInbox(link.server);
    OutMessage* m = NewMessage(seed, 16, {100, 8 * kKiB});
    void* c = Send(link.client, *m);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1 && tracker().Done(c); },
                                kOpTimeout, "one message on a fresh context"));
    EXPECT_TRUE(SameMessage(*m, in->messages().front()));
  }
};

std::string FdTarget(int fd) {
  char path[64], buf[PATH_MAX];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  if (n < 0) return "?";
  buf[n] = '\0';
  return buf;
}

std::string DescribeFds(const std::set<int>& fds) {
  std::string out;
  for (int fd : fds) out += "\n    fd " + std::to_string(fd) + " -> " + FdTarget(fd);
  return out;
}

std::set<int> Minus(const std::set<int>& x, const std::set<int>& y) {
  std::set<int> out;
  for (int v : x) {
    if (y.count(v) == 0) out.insert(v);
  }
  return out;
}

TEST_P(LifecycleTest, InitFiniRepeatedLeaksNothing) {
  // Warm up once: a plugin may open process-wide things on first use.
  {
    Transport* t = OpenContext(0, "life-1-warmup");
    ASSERT_NE(t, nullptr);
    ExchangeOn(t, 1);
    FinishContext(t);
  }
  const std::set<int> before = OpenFds();
  for (int i = 0; i < 100; ++i) {
    Transport* t = OpenContext(0, "life-1");
    ASSERT_NE(t, nullptr) << "cycle " << i;
    FinishContext(t);
  }
  for (int i = 0; i < 10; ++i) {
    Transport* t = OpenContext(0, "life-1-traffic");
    ASSERT_NE(t, nullptr) << "cycle " << i;
    ExchangeOn(t, 10 + i);
    if (HasFatalFailure()) return;
    FinishContext(t);
  }
  const std::set<int> after = OpenFds();
  std::set<int> leaked = Minus(after, before);
  EXPECT_TRUE(leaked.empty())
      << "after 110 init/fini cycles (10 with a listener and a connection), "
      << leaked.size() << " more fds are open:" << DescribeFds(leaked);
}

TEST_P(LifecycleTest, CoexistsWithOtherPlugins) {
  // Every other plugin this run tests, plus every plugin the loader finds,
  // each loaded and with an open context and listener at the same time.
  std::map<std::string, std::shared_ptr<const Plugin>> others;
  for (const PluginCase& c : PluginCases()) {
    if (c.plugin && c.plugin->path() != plugin()->path())
      others[c.plugin->path()] = c.plugin;
  }
  PluginLoader loader;
  for (const auto& p : loader.LoadAll()) {
    if (p->path() != plugin()->path() && p->name() != plugin()->name()) {
      others[p->path()] = p;
    }
  }
  if (others.empty()) {
    FERRY_NOT_RUN("no other plugin is available to load alongside this one");
  }
  struct Other {
    std::unique_ptr<Transport> t;
    ferry_listener_t* listener = nullptr;
  };
  std::vector<Other> open;
  std::string names;
  for (const auto& [path, p] : others) {
    auto t = Transport::Open(p, 0, "life-2-other");
    if (!t.ok()) {
      std::cout << "  note: could not open other plugin " << p->name() << ": "
                << t.status().ToString() << "\n";
      continue;
    }
    Other o;
    o.t = std::move(t.value());
    if (!o.t->Listen("", nullptr, &o.listener).ok()) o.listener = nullptr;
    ferry_event_t ev[4];
    uint32_t n = 0;
    (void)o.t->Progress(ev, 4, &n);
    names += " " + p->name();
    open.push_back(std::move(o));
  }
  RecordProperty("other_plugins", names);
  if (open.empty()) FERRY_NOT_RUN("no other plugin could open a context here");

  Link link;
  ASSERT_TRUE(MakeLink(&link));
  Inbox* in = NewInbox(link.server);
  OutMessage* m1 = NewMessage(21, 16, {64 * kKiB});
  ASSERT_NE(Send(link.client, *m1), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 1; }, kOpTimeout,
                              "a message while other plugins are open"));
  EXPECT_TRUE(SameMessage(*m1, in->messages()[0]));

  // The others go away (close_listener, fini) while this one keeps working.
  for (Other& o : open) {
    if (o.listener) o.t->CloseListener(o.listener);
    o.t.reset();
  }
  OutMessage* m2 = NewMessage(22, 16, {64 * kKiB});
  ASSERT_NE(Send(link.client, *m2), nullptr);
  ASSERT_TRUE(pump().RunUntil([&] { return in->complete() == 2; }, kOpTimeout,
                              "a message after the other plugins' fini()"));
  EXPECT_TRUE(SameMessage(*m2, in->messages()[1]));
}

TEST_P(LifecycleTest, TwoContextsTalk) {
  if (!multi_context()) {
    FERRY_NOT_RUN("the plugin does not declare FERRY_FEATURE_MULTI_CONTEXT");
  }
  ASSERT_NE(a(), b());
  if (!a()->domain().empty() && !b()->domain().empty()) {
    ASSERT_EQ(a()->domain(), b()->domain())
        << "two contexts in one process report different domains";
  }
  Link ab;
  ASSERT_TRUE(MakeLink(a(), b(), &ab));
  Inbox* at_a = NewInbox(ab.server);
  Inbox* at_b = NewInbox(ab.client);
  OutMessage* to_a = NewMessage(31, 16, {256 * kKiB});
  OutMessage* to_b = NewMessage(32, 16, {256 * kKiB});
  ASSERT_NE(Send(ab.client, *to_a), nullptr);
  ASSERT_NE(Send(ab.server, *to_b), nullptr);
  ASSERT_TRUE(
      pump().RunUntil([&] { return at_a->complete() == 1 && at_b->complete() == 1; },
                      kOpTimeout, "one message each way between two contexts"));
  EXPECT_TRUE(SameMessage(*to_a, at_a->messages()[0]));
  EXPECT_TRUE(SameMessage(*to_b, at_b->messages()[0]));

  // A third context connects to a(); then b() is finished entirely. The
  // others must not notice anything but b()'s connection going away.
  Transport* c = OpenContext(0, "conformance-c");
  ASSERT_NE(c, nullptr);
  Link ac;
  ASSERT_TRUE(MakeLink(a(), c, &ac));
  FinishContext(b());
  Inbox* at_a2 = NewInbox(ac.server);
  OutMessage* m = NewMessage(33, 16, {1 * kMiB});
  ASSERT_NE(Send(ac.client, *m), nullptr);
  ASSERT_TRUE(
      pump().RunUntil([&] { return at_a2->complete() == 1; }, kOpTimeout,
                      "a message from a third context after the second's fini()"));
  EXPECT_TRUE(SameMessage(*m, at_a2->messages()[0]));
}

TEST_P(LifecycleTest, ListenConnectNeverBlock) {
  // Every call below is timed by the harness (ExpectPrompt): each must
  // return in under a second, whatever is at the other end.
  std::string address;
  ferry_listener_t* listener = Listen(a(), &address);
  ASSERT_NE(listener, nullptr);

  // Connect to a listener of the very context that connects, without any
  // progress in between: a handshake done inside connect() deadlocks here.
  void* c1 = nullptr;
  ferry_conn_t* self = StartConnect(a(), address, &c1);
  ASSERT_NE(self, nullptr) << "connect() to a live listener was refused";

  // A listener that is gone.
  std::string dead_address;
  ferry_listener_t* dead = Listen(a(), &dead_address);
  ASSERT_NE(dead, nullptr);
  CloseListener(a(), dead);
  void* c2 = nullptr;
  ferry_conn_t* to_dead = StartConnect(b(), dead_address, &c2);

  // An address nobody answers (RFC 5737 TEST-NET-1), and nonsense. Either
  // may be refused at once; neither may block.
  void* c3 = nullptr;
  ferry_conn_t* to_void = StartConnect(b(), "192.0.2.1:9", &c3);
  void* c4 = nullptr;
  ferry_conn_t* to_junk = StartConnect(b(), "\x01 not an address \x02", &c4);

  // Connections pending on a listener that closes before accepting them.
  std::string short_address;
  ferry_listener_t* short_lived = Listen(a(), &short_address);
  ASSERT_NE(short_lived, nullptr);
  std::vector<ferry_conn_t*> orphans;
  for (int i = 0; i < 3; ++i) {
    void* c = nullptr;
    if (ferry_conn_t* conn = StartConnect(b(), short_address, &c))
      orphans.push_back(conn);
  }
  CloseListener(a(), short_lived);

  // The live connection completes; the others complete one way or another
  // within the bound, or are cancelled by close().
  ASSERT_TRUE(WaitDone(c1, "CONNECTED to the context's own listener"));
  EXPECT_EQ(StatusText(tracker().StatusOf(c1)), StatusText(FERRY_OK))
      << tracker().MessageOf(c1);
  if (to_dead != nullptr) {
    EXPECT_TRUE(WaitDone(c2, "CONNECTED (failed) for a connect to a closed listener"));
  }
  for (ferry_conn_t* conn : {self, to_dead, to_void, to_junk}) {
    if (conn != nullptr) CloseConn(conn);
  }
  for (ferry_conn_t* conn : orphans) CloseConn(conn);
  ASSERT_TRUE(pump().RunUntil([&] { return pump().ClosingConns().empty(); }, kOpTimeout,
                              "CLOSED for every connection closed while connecting"));
  EXPECT_EQ(tracker().Pending(), 0u);
}

TEST_P(LifecycleTest, ManyConnectionsOnOneListener) {
  constexpr int kConns = 64;
  std::string address;
  ferry_listener_t* listener = Listen(a(), &address);
  ASSERT_NE(listener, nullptr);
  std::vector<ferry_conn_t*> clients;
  std::vector<void*> cookies;
  for (int i = 0; i < kConns; ++i) {
    void* c = nullptr;
    Status s;
    ferry_conn_t* conn = StartConnect(b(), address, &c, &s);
    ASSERT_NE(conn, nullptr) << "connect " << i << " of " << kConns << ": "
                             << s.ToString();
    clients.push_back(conn);
    cookies.push_back(c);
  }
  std::vector<ferry_conn_t*> accepted;
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        while (ferry_conn_t* s = TakeAccepted(listener)) accepted.push_back(s);
        for (void* c : cookies) {
          if (!tracker().Done(c)) return false;
        }
        return accepted.size() == kConns;
      },
      kOpTimeout, std::to_string(kConns) + " CONNECTED and ACCEPTED"));
  for (int i = 0; i < kConns; ++i) {
    ASSERT_EQ(StatusText(tracker().StatusOf(cookies[i])), StatusText(FERRY_OK))
        << "connect " << i << ": " << tracker().MessageOf(cookies[i]);
  }
  // Client i sends a message carrying i; each accepted connection must see
  // exactly one, every i exactly once; the answer goes back on the same
  // connection to the client that asked.
  std::map<ferry_conn_t*, Inbox*> server_in;
  for (ferry_conn_t* s : accepted) server_in[s] = NewInbox(s);
  std::vector<Inbox*> client_in;
  std::vector<OutMessage*> asks;
  for (int i = 0; i < kConns; ++i) {
    client_in.push_back(NewInbox(clients[i]));
    asks.push_back(NewMessage(1000 + i, 8, {1 * kKiB}));
    std::memcpy(asks.back()->header.data(), &i, sizeof i);
    ASSERT_NE(Send(clients[i], *asks.back()), nullptr);
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        for (auto& [conn, in] : server_in) {
          if (in->complete() < 1) return false;
        }
        return true;
      },
      kOpTimeout, "one message on each of " + std::to_string(kConns) + " connections"));
  std::set<int> seen;
  std::vector<OutMessage*> answers;
  for (auto& [conn, in] : server_in) {
    ASSERT_EQ(in->arrived(), 1u)
        << "an accepted connection got " << in->arrived() << " messages";
    int i = -1;
    std::memcpy(&i, in->messages()[0].header.data(), sizeof i);
    ASSERT_TRUE(i >= 0 && i < kConns);
    EXPECT_TRUE(seen.insert(i).second) << "client " << i << " arrived twice";
    EXPECT_TRUE(SameMessage(*asks[i], in->messages()[0]));
    answers.push_back(NewMessage(2000 + i, 8, {512}));
    std::memcpy(answers.back()->header.data(), &i, sizeof i);
    ASSERT_NE(Send(conn, *answers.back()), nullptr);
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        for (Inbox* in : client_in) {
          if (in->complete() < 1) return false;
        }
        return true;
      },
      kOpTimeout, "an answer on each client connection"));
  for (int i = 0; i < kConns; ++i) {
    int got = -1;
    std::memcpy(&got, client_in[i]->messages()[0].header.data(), sizeof got);
    EXPECT_EQ(got, i) << "client " << i << " received the answer meant for " << got;
  }
}

TEST_P(LifecycleTest, CloseCompletesInFlightOps) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  // Queue far more than socket buffers hold, with no progress in between,
  // then close: whatever did not go out must complete as CANCELLED (or
  // PEER_GONE), every send exactly once, and CLOSED must come last (the
  // pump checks the order).
  std::vector<void*> sends;
  for (int i = 0; i < 4; ++i) {
    OutMessage* m = NewMessage(40 + i, 16, {16 * kMiB});
    void* c = nullptr;
    Status s = TrySend(link.client, *m, &c);
    if (s.ok()) sends.push_back(c);
  }
  for (int i = 0; i < 16; ++i) {
    OutMessage* m = NewMessage(50 + i, 16, {4 * kKiB});
    void* c = nullptr;
    Status s = TrySend(link.client, *m, &c);
    if (s.ok()) sends.push_back(c);
  }
  ASSERT_FALSE(sends.empty()) << "not a single send was accepted before progress";
  // A connect still in flight, closed before it could complete.
  void* cc = nullptr;
  ferry_conn_t* connecting = StartConnect(b(), link.address, &cc);
  ASSERT_NE(connecting, nullptr);

  CloseConn(link.client);
  CloseConn(connecting);
  // After close() and before CLOSED: a send is refused, posts nothing.
  OutMessage* late = NewMessage(60, 8, {8});
  void* lc = nullptr;
  Status late_status = TrySend(link.client, *late, &lc);
  EXPECT_EQ(StatusText(late_status.code()), StatusText(FERRY_FAILED_PRECONDITION))
      << "send() on a closing connection (after close(), before CLOSED)";
  EXPECT_FALSE(late_status.message().empty());

  ASSERT_TRUE(WaitClosed(link.client));
  ASSERT_TRUE(WaitClosed(connecting));
  int ok = 0, cancelled = 0, gone = 0;
  for (void* c : sends) {
    ASSERT_TRUE(tracker().Done(c));
    switch (tracker().StatusOf(c)) {
      case FERRY_OK:
        ++ok;
        break;
      case FERRY_CANCELLED:
        ++cancelled;
        break;
      case FERRY_PEER_GONE:
        ++gone;
        break;
      default:
        ADD_FAILURE() << "a send in flight at close() completed with "
                      << StatusText(tracker().StatusOf(c))
                      << "; expected OK, CANCELLED or PEER_GONE";
    }
  }
  // Closed before any progress, so the host cannot have seen its CONNECTED:
  // "a CONNECTED the host has not seen yet completes with FERRY_CANCELLED".
  EXPECT_EQ(StatusText(tracker().StatusOf(cc)), StatusText(FERRY_CANCELLED))
      << "a connect closed before its CONNECTED was returned";
  RecordProperty(
      "sends_ok_cancelled_gone",
      std::to_string(ok) + "/" + std::to_string(cancelled) + "/" + std::to_string(gone));

  // Arrivals the host has not seen when it closes are dropped: none may be
  // returned after close(). To have one queued inside the plugin, the client
  // context gets one progress() with room for a single event while both its
  // own send completion and an incoming message are ready.
  if (!multi_context()) return;  // needs the two sides progressed apart
  Link second;
  ASSERT_TRUE(MakeLink(&second));
  std::vector<OutMessage*> incoming;
  for (int i = 0; i < 3; ++i) {
    incoming.push_back(NewMessage(61 + i, 16, {64}));
    ASSERT_NE(Send(second.server, *incoming.back()), nullptr);
  }
  ASSERT_TRUE(pump().RunUntil(
      [&] {
        pump().PollTransport(second.server_t, 32);
        return tracker().Pending(second.server) == 0;
      },
      kOpTimeout, "the server's sends to complete"));
  OutMessage* outgoing = NewMessage(64, 16, {64});
  ASSERT_NE(Send(second.client, *outgoing), nullptr);
  pump().PollTransport(second.client_t, 1);
  for (uint64_t msg_id : pump().UnansweredArrivals(second.client)) {
    Discard(second.client, msg_id);
  }
  CloseConn(second.client);  // the pump fails any ARRIVAL from here on (INV-7)
  ASSERT_TRUE(WaitClosed(second.client));
}

TEST_P(LifecycleTest, ConnUserDataReported) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  struct Seen {
    int arrivals = 0;
    void* conn_user_data = nullptr;
  };
  Seen at_server, at_client;
  auto recorder = [this](Seen* seen) {
    return [this, seen](const Event& e) {
      ++seen->arrivals;
      seen->conn_user_data = e.conn_user_data;
      Discard(e.conn, e.msg_id);
    };
  };
  pump().SetArrivalHandler(link.server, recorder(&at_server));
  pump().SetArrivalHandler(link.client, recorder(&at_client));
  auto round = [&](ferry_conn_t* from, Seen* seen, int expected) {
    OutMessage* m = NewMessage(70 + expected, 8, {8});
    ASSERT_NE(Send(from, *m), nullptr);
    ASSERT_TRUE(pump().RunUntil([&] { return seen->arrivals == expected; }, kOpTimeout,
                                "an arrival"));
  };
  // The connecting side: connect()'s user_data, from the first event on.
  round(link.server, &at_client, 1);
  EXPECT_EQ(at_client.conn_user_data, link.connect_cookie)
      << "events on a connected conn must carry connect()'s user_data";
  void* connect_ud = link.connect_cookie;

  if (!a()->Has(FERRY_VT(set_conn_user_data))) {
    round(link.client, &at_server, 1);
    EXPECT_EQ(at_server.conn_user_data, nullptr)
        << "an accepted conn never given user data must report NULL";
    return;
  }
  void* x = reinterpret_cast<void*>(0xABC0);
  void* y = reinterpret_cast<void*>(0xDEF0);
  a()->SetConnUserData(link.server, x);
  pump().NoteConnUserData(link.server, x);
  round(link.client, &at_server, 1);
  EXPECT_EQ(at_server.conn_user_data, x) << "after set_conn_user_data(x)";
  a()->SetConnUserData(link.server, y);
  pump().NoteConnUserData(link.server, y);
  round(link.client, &at_server, 2);
  EXPECT_EQ(at_server.conn_user_data, y) << "after set_conn_user_data(y)";
  b()->SetConnUserData(link.client, x);
  pump().NoteConnUserData(link.client, x);
  round(link.server, &at_client, 2);
  EXPECT_EQ(at_client.conn_user_data, x)
      << "set_conn_user_data() on a connected conn replaces connect()'s user_data "
      << connect_ud;
}

TEST_P(LifecycleTest, FdsAreCloseOnExec) {
  // A host that starts worker processes (fork+exec) must not leak transport
  // sockets into them: a leaked copy keeps a port bound and a connection
  // half-alive after the host closed it, and peer death then goes unseen.
  const std::set<int> before = OpenFds();
  Transport* t = OpenContext(0, "life-8");
  ASSERT_NE(t, nullptr);
  Link link;
  ASSERT_TRUE(MakeLink(t, t, &link));
  std::set<int> opened = Minus(OpenFds(), before);
  std::set<int> inheritable;
  for (int fd : opened) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) inheritable.insert(fd);
  }
  EXPECT_TRUE(inheritable.empty())
      << inheritable.size() << " of the " << opened.size()
      << " fds opened by init/listen/connect/accept lack FD_CLOEXEC (use "
         "SOCK_CLOEXEC, O_CLOEXEC, EFD_CLOEXEC, EPOLL_CLOEXEC, accept4):"
      << DescribeFds(inheritable);
  RecordProperty("fds_opened", std::to_string(opened.size()));
}

INSTANTIATE_TEST_SUITE_P(Plugins, LifecycleTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
