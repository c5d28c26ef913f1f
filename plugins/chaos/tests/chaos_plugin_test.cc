// Tests of the chaos transport, loaded through the production loader and
// driven through ferry::Transport like the core drives it. A plain tcp
// context sends numbered messages over loopback to a chaos context (chaos
// over tcp: the addresses are tcp's); then the sender closes, so the
// receiver's CONN_BROKEN marks "everything that will ever arrive has". No
// test sleeps: each pumps progress() until a condition holds or a deadline
// passes, waiting on the wakeup fds in between.
#include "loader/host_services.h"
#include "testkit/endpoint.h"
#include "testkit/event.h"
#include "testkit/plugin.h"
#include "transport/transport.h"

#include <ferry/transport.h>

#include <gtest/gtest.h>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDeadline = std::chrono::seconds(30);
constexpr uint32_t kMagic = 0xC4A05u;

const char* const kKeys[] = {"inner",    "seed",      "delay_us_max",    "reorder",
                             "dup_rate", "drop_rate", "max_inline_size", "priority"};

using ferry::testkit::Endpoint;
using ferry::testkit::Event;

std::shared_ptr<const ferry::Plugin> Load(const std::string& name) {
  auto loaded = ferry::testkit::LoadPlugin(FERRY_CHAOS_PLUGIN_DIR, name);
  if (!loaded.ok()) {
    ADD_FAILURE() << "cannot load " << name << " from " << FERRY_CHAOS_PLUGIN_DIR << ": "
                  << loaded.status().ToString();
    return nullptr;
  }
  return loaded.value();
}

// The chaos parameters of one test, set in-process (they win over the
// environment) before the context is opened: chaos reads them at init().
struct Params {
  std::string inner = "tcp";
  std::string seed = "1";
  uint64_t delay_us_max = 0;
  int reorder = -1;  // -1: not set (the default: 1 when delay_us_max > 0)
  int dup_rate = 0;
  int drop_rate = 0;
  uint64_t max_inline_size = 0;
};

void Apply(const Params& p) {
  for (const char* key : kKeys) ferry::ClearPluginParam("chaos", key);
  ferry::SetPluginParam("chaos", "inner", p.inner);
  ferry::SetPluginParam("chaos", "seed", p.seed);
  ferry::SetPluginParam("chaos", "delay_us_max", std::to_string(p.delay_us_max));
  if (p.reorder >= 0)
    ferry::SetPluginParam("chaos", "reorder", std::to_string(p.reorder));
  ferry::SetPluginParam("chaos", "dup_rate", std::to_string(p.dup_rate));
  ferry::SetPluginParam("chaos", "drop_rate", std::to_string(p.drop_rate));
  ferry::SetPluginParam("chaos", "max_inline_size", std::to_string(p.max_inline_size));
}

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Nothing from the environment may change what a test asks for.
    for (const char* key : kKeys)
      unsetenv(ferry::PluginParamEnvName("chaos", key).c_str());
  }
  void TearDown() override {
    for (const char* key : kKeys) ferry::ClearPluginParam("chaos", key);
  }
};

// A context of `plugin` ("chaos" or "tcp"), 32 events per progress().
std::unique_ptr<Endpoint> Open(const std::string& plugin) {
  auto p = Load(plugin);
  if (!p) return nullptr;
  Endpoint::Options options;
  options.instance = "chaos-test";
  options.max_events = 32;
  options.expect_event_messages = false;
  auto e = std::make_unique<Endpoint>(p, options);
  if (!e->ok()) {
    ADD_FAILURE() << "cannot open " << plugin << ": " << e->status().ToString();
    return nullptr;
  }
  return e;
}

// Progresses every endpoint until done(); between idle rounds it waits (at
// most 10 ms) on their wakeup fds. False at the deadline.
bool Pump(std::initializer_list<Endpoint*> eps, const std::function<bool()>& done,
          std::chrono::milliseconds timeout = kDeadline) {
  return ferry::testkit::PumpUntil(eps, done, timeout,
                                   ferry::testkit::Idle::kWaitOnWakeups);
}

unsigned char PatternByte(uint32_t index, uint64_t j) {
  return static_cast<unsigned char>((index * 31u + j * 7u) & 0xffu);
}
uint64_t SegmentSize(uint32_t index) {
  return index % 10 == 0 ? 64 * 1024 : 16;
}

// What the receiving side saw.
struct Received {
  std::vector<uint32_t> order;  // message indices, in arrival order
  std::set<uint64_t> msg_ids;
  size_t arrivals = 0;
  size_t after_broken = 0;          // arrivals returned after CONN_BROKEN
  size_t before_sender_closed = 0;  // arrivals returned before that
  ferry_status_t broken_status = FERRY_OK;
  size_t placed_not_inline = 0;
  std::string description;
};

struct Options {
  bool pump_until_sent = true;
  // Once every send completed: the receiver answers only after its wakeup fd
  // said so (poll without a short timeout), to prove held arrivals wake it.
  bool receiver_sleeps_on_fd = false;
  // The first not-inline segment is first placed into a buffer one byte
  // short, which must be refused.
  bool short_place_first = false;
};

// n numbered messages from tcp to chaos; the sender then closes, and the
// receiver reads until its CONN_BROKEN, answering arrivals alternately with
// discard() and place() (and place() for segments that are not inline).
void Exchange(const Params& p, uint32_t n, Received* out, Options opt = Options()) {
  Apply(p);
  auto recv = Open("chaos");
  ASSERT_NE(recv, nullptr);
  auto send = Open("tcp");
  ASSERT_NE(send, nullptr);
  out->description = recv->t().description();

  ferry_listener_t* listener = nullptr;
  int listener_cookie = 0;
  ASSERT_TRUE(recv->t().Listen("", &listener_cookie, &listener).ok());
  auto address = recv->t().ListenerAddress(listener);
  ASSERT_TRUE(address.ok());
  ferry_conn_t* sconn = nullptr;
  int connect_cookie = 0;
  ASSERT_TRUE(send->t().Connect(address.value(), &connect_cookie, &sconn).ok());

  ferry_conn_t* rconn = nullptr;
  bool connected = false, sender_closed = false, broken = false, recv_closed = false;
  size_t sends_done = 0;
  struct PendingPlace {
    uint32_t index;
    std::vector<unsigned char> buf;  // for the one segment
    bool not_inline;
  };
  std::map<void*, std::unique_ptr<PendingPlace>> places;
  bool short_tried = false;

  auto handle_send = [&] {
    while (!send->events().empty()) {
      Event e = std::move(send->events().front());
      send->events().pop_front();
      if (e.type == FERRY_EV_CONNECTED) {
        EXPECT_EQ(e.status, FERRY_OK) << e.message;
        connected = true;
      } else if (e.type == FERRY_EV_SEND_DONE) {
        EXPECT_EQ(e.status, FERRY_OK) << e.message;
        ++sends_done;
      } else if (e.type == FERRY_EV_CLOSED) {
        sender_closed = true;
        out->before_sender_closed = out->arrivals;
      }
    }
  };
  auto handle_recv = [&] {
    while (!recv->events().empty()) {
      Event e = std::move(recv->events().front());
      recv->events().pop_front();
      switch (e.type) {
        case FERRY_EV_ACCEPTED:
          EXPECT_EQ(e.user_data, &listener_cookie);
          rconn = e.conn;
          break;
        case FERRY_EV_ARRIVAL: {
          EXPECT_FALSE(recv_closed);
          ++out->arrivals;
          if (broken) ++out->after_broken;
          EXPECT_TRUE(out->msg_ids.insert(e.msg_id).second)
              << "msg_id reused: " << e.msg_id;
          ASSERT_EQ(e.header.size(), 8u);
          uint32_t index = 0, magic = 0;
          std::memcpy(&index, e.header.data(), 4);
          std::memcpy(&magic, e.header.data() + 4, 4);
          ASSERT_EQ(magic, kMagic);
          ASSERT_LT(index, n);
          ASSERT_EQ(e.segments.size(), 1u);
          ASSERT_EQ(e.segments[0].length, SegmentSize(index));
          const bool is_inline = e.segments[0].is_inline;
          EXPECT_EQ(is_inline,
                    p.max_inline_size == 0 || SegmentSize(index) <= p.max_inline_size)
              << "message " << index;
          if (is_inline) {
            for (uint64_t j = 0; j < e.segments[0].length; ++j) {
              ASSERT_EQ(static_cast<unsigned char>(e.segments[0].bytes[j]),
                        PatternByte(index, j))
                  << "message " << index << " byte " << j;
            }
          }
          out->order.push_back(index);
          if (is_inline && out->arrivals % 2 == 0) {
            ferry::Status st = recv->t().Discard(e.conn, e.msg_id);
            EXPECT_TRUE(st.ok()) << st.ToString();
            break;
          }
          auto pp = std::make_unique<PendingPlace>();
          pp->index = index;
          pp->not_inline = !is_inline;
          ferry_place_dest_t dest{};
          dest.struct_size = FERRY_PLACE_DEST_STRUCT_SIZE;
          dest.device = {FERRY_DEVICE_CPU, 0};
          if (!is_inline) {
            pp->buf.assign(e.segments[0].length, 0xEE);
            dest.data = pp->buf.data();
            dest.capacity = pp->buf.size();
          }
          ferry_place_args_t pa{};
          pa.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
          pa.num_dests = 1;
          pa.msg_id = e.msg_id;
          pa.dests = &dest;
          pa.dest_stride = sizeof dest;
          pa.user_data = pp.get();
          if (!is_inline && opt.short_place_first && !short_tried) {
            short_tried = true;
            ferry_place_dest_t shorter = dest;
            shorter.capacity = dest.capacity - 1;
            ferry_place_args_t bad = pa;
            bad.dests = &shorter;
            ferry::Status st = recv->t().Place(e.conn, bad);
            EXPECT_EQ(st.code(), FERRY_INVALID_ARGUMENT) << st.ToString();
            EXPECT_FALSE(st.message().empty());
            EXPECT_EQ(pp->buf[0], 0xEE) << "a refused place() wrote into the buffer";
          }
          ferry::Status st = recv->t().Place(e.conn, pa);
          EXPECT_TRUE(st.ok()) << st.ToString();
          if (st.ok()) places[pp.get()] = std::move(pp);
          break;
        }
        case FERRY_EV_PLACE_DONE: {
          EXPECT_EQ(e.status, FERRY_OK) << e.message;
          auto it = places.find(e.user_data);
          ASSERT_NE(it, places.end()) << "PLACE_DONE for an unknown place()";
          PendingPlace& pp = *it->second;
          if (pp.not_inline) {
            ++out->placed_not_inline;
            for (uint64_t j = 0; j < pp.buf.size(); ++j) {
              ASSERT_EQ(pp.buf[j], PatternByte(pp.index, j))
                  << "placed message " << pp.index << " byte " << j;
            }
          }
          places.erase(it);
          break;
        }
        case FERRY_EV_CONN_BROKEN:
          EXPECT_FALSE(broken) << "CONN_BROKEN twice";
          EXPECT_FALSE(e.message.empty());
          broken = true;
          out->broken_status = e.status;
          break;
        case FERRY_EV_CLOSED:
          EXPECT_EQ(e.conn, rconn);
          recv_closed = true;
          break;
        default:
          ADD_FAILURE() << "unexpected event type " << e.type;
      }
    }
  };
  auto step = [&] {
    handle_send();
    handle_recv();
  };

  ASSERT_TRUE(Pump({recv.get(), send.get()}, [&] {
    step();
    return connected && rconn != nullptr;
  })) << "CONNECTED and ACCEPTED";

  // The messages stay alive until their SEND_DONE.
  std::vector<std::vector<unsigned char>> headers(n), payloads(n);
  for (uint32_t i = 0; i < n; ++i) {
    headers[i].resize(8);
    std::memcpy(headers[i].data(), &i, 4);
    std::memcpy(headers[i].data() + 4, &kMagic, 4);
    payloads[i].resize(SegmentSize(i));
    for (uint64_t j = 0; j < payloads[i].size(); ++j) payloads[i][j] = PatternByte(i, j);
    ferry_segment_t seg{};
    seg.struct_size = FERRY_SEGMENT_STRUCT_SIZE;
    seg.data = payloads[i].data();
    seg.length = payloads[i].size();
    seg.device = {FERRY_DEVICE_CPU, 0};
    ferry_send_args_t sa{};
    sa.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
    sa.num_segments = 1;
    sa.header = headers[i].data();
    sa.header_len = headers[i].size();
    sa.segments = &seg;
    sa.segment_stride = sizeof seg;
    sa.user_data = &payloads[i];
    while (true) {
      ferry::Status st = send->t().Send(sconn, sa);
      if (st.code() == FERRY_UNAVAILABLE) {  // back-pressure: progress, retry
        recv->PollOnce();
        send->PollOnce();
        step();
        continue;
      }
      ASSERT_TRUE(st.ok()) << st.ToString();
      break;
    }
  }
  ASSERT_TRUE(Pump({recv.get(), send.get()}, [&] {
    step();
    return sends_done == n;
  })) << "SEND_DONE for every message";

  if (opt.receiver_sleeps_on_fd) {
    // From here on the receiver runs only when its fd says so: the arrivals
    // chaos still holds must wake it (timer), and so must its own queued
    // events (PLACE_DONE).
    ASSERT_GE(recv->wakeup_fd(), 0);
    const auto deadline = Clock::now() + kDeadline;
    while (out->arrivals < n || !places.empty()) {
      ASSERT_LT(Clock::now(), deadline);
      pollfd pfd{recv->wakeup_fd(), POLLIN, 0};
      ASSERT_EQ(::poll(&pfd, 1, 5000), 1)
          << "the wakeup fd stayed quiet for 5 s with " << (n - out->arrivals)
          << " arrivals held and " << places.size() << " placements pending";
      recv->PollOnce();
      step();
    }
    // Everything returned: the fd goes quiet.
    bool quiet = false;
    for (int i = 0; i < 100 && !quiet; ++i) {
      recv->PollOnce();
      step();
      pollfd pfd{recv->wakeup_fd(), POLLIN, 0};
      quiet = ::poll(&pfd, 1, 0) == 0;
    }
    EXPECT_TRUE(quiet) << "the wakeup fd stays readable with nothing to do";
  }

  send->t().Close(sconn);
  ASSERT_TRUE(Pump({recv.get(), send.get()}, [&] {
    step();
    return sender_closed && broken && places.empty();
  })) << "the sender's CLOSED, then every arrival and CONN_BROKEN at the receiver";
  recv->t().Close(rconn);
  ASSERT_TRUE(Pump({recv.get()}, [&] {
    step();
    return recv_closed;
  })) << "CLOSED at the receiver";
  recv->t().CloseListener(listener);
}

// The documented decisions (README.md, "Replaying a seed"), computed here
// independently: how many copies of message i arrive on a context's first
// connection.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
std::vector<int> ExpectedCopies(uint64_t seed, uint32_t n, int drop_rate, int dup_rate) {
  std::mt19937_64 rng(SplitMix64(seed ^ SplitMix64(0 + 1)));  // connection 0
  std::vector<int> copies(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t drop = rng(), dup = rng();
    rng();  // delay
    rng();  // the duplicate's delay
    const bool dropped = drop % 1000 < static_cast<uint64_t>(drop_rate);
    const bool duplicated = !dropped && dup % 1000 < static_cast<uint64_t>(dup_rate);
    copies[i] = dropped ? 0 : duplicated ? 2 : 1;
  }
  return copies;
}
std::vector<int> Copies(const Received& run, uint32_t n) {
  std::vector<int> copies(n);
  for (uint32_t i : run.order) ++copies[i];
  return copies;
}

constexpr uint32_t kN = 200;

TEST_F(ChaosTest, ReportsWhatItIs) {
  Params p;
  p.seed = "12345";
  Apply(p);
  auto chaos = Open("chaos");
  ASSERT_NE(chaos, nullptr);
  auto tcp = Open("tcp");
  ASSERT_NE(tcp, nullptr);
  const ferry_context_info_t& c = chaos->t().info();
  const ferry_context_info_t& t = tcp->t().info();
  EXPECT_EQ(c.caps & FERRY_CAP_ORDERED, 0u) << "chaos never claims ORDERED";
  EXPECT_EQ(c.caps & FERRY_CAP_ZERO_COPY_RECV, 0u);
  EXPECT_NE(c.caps & FERRY_CAP_THREAD_SAFE, 0u);
  EXPECT_NE(c.caps & FERRY_CAP_WAKEUP_FD, 0u) << "tcp has a wakeup fd, so chaos has one";
  EXPECT_GE(c.wakeup_fd, 0);
  EXPECT_NE(c.wakeup_fd, t.wakeup_fd);
  EXPECT_EQ(c.caps & FERRY_CAP_DETECTS_PEER_DEATH, t.caps & FERRY_CAP_DETECTS_PEER_DEATH);
  EXPECT_EQ(c.max_message_size, t.max_message_size);
  EXPECT_EQ(c.max_inline_size, c.max_message_size) << "every segment arrives inline";
  EXPECT_EQ(c.max_header_size, t.max_header_size);
  EXPECT_EQ(c.max_segments, t.max_segments);
  EXPECT_EQ(c.priority, 0);
  EXPECT_EQ(chaos->t().domain(), tcp->t().domain());
  EXPECT_NE(chaos->t().description().find("seed=12345"), std::string::npos)
      << chaos->t().description();
}

TEST_F(ChaosTest, DelayReordersAndDeliversEachExactlyOnce) {
  Params p;
  p.seed = "42";
  p.delay_us_max = 2000;  // reorder defaults to 1 with a delay
  Received run;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, kN, &run));
  std::vector<uint32_t> sorted = run.order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> expected(kN);
  std::iota(expected.begin(), expected.end(), 0u);
  EXPECT_EQ(sorted, expected) << "every message exactly once";
  EXPECT_NE(run.order, expected)
      << "a 0..2 ms delay per arrival must reorder 200 messages";
  EXPECT_EQ(run.after_broken, 0u)
      << "arrivals held when the peer closed come before CONN_BROKEN";
  EXPECT_EQ(run.broken_status, FERRY_PEER_GONE);
  EXPECT_NE(run.description.find("seed=42 "), std::string::npos) << run.description;
}

TEST_F(ChaosTest, DelayWithoutReorderKeepsTheOrder) {
  Params p;
  p.seed = "42";
  p.delay_us_max = 2000;
  p.reorder = 0;
  Received run;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, kN, &run));
  std::vector<uint32_t> expected(kN);
  std::iota(expected.begin(), expected.end(), 0u);
  EXPECT_EQ(run.order, expected);
}

TEST_F(ChaosTest, HeldArrivalsComeBeforeConnBroken) {
  // Held up to 300 ms: most arrivals are still held when the sender has
  // closed and tcp reports the break; they are all delivered before chaos's
  // CONN_BROKEN, as a real transport delivers bytes that came before a FIN.
  Params p;
  p.seed = "17";
  p.delay_us_max = 300000;
  Received run;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, 50, &run));
  EXPECT_LT(run.before_sender_closed, 50u) << "nothing was held when the peer closed";
  EXPECT_EQ(run.arrivals, 50u);
  EXPECT_EQ(run.after_broken, 0u);
  EXPECT_EQ(run.broken_status, FERRY_PEER_GONE);
}

TEST_F(ChaosTest, DupRate1000DeliversEachTwice) {
  Params p;
  p.seed = "3";
  p.dup_rate = 1000;
  Received run;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, kN, &run));
  EXPECT_EQ(Copies(run, kN), std::vector<int>(kN, 2));
  EXPECT_EQ(run.msg_ids.size(), 2 * kN) << "a duplicate has its own msg_id";
  EXPECT_EQ(run.after_broken, 0u);
}

TEST_F(ChaosTest, DropRate500DropsAboutHalf) {
  Params p;
  p.seed = "7";
  p.drop_rate = 500;
  Received run;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, kN, &run));
  std::vector<int> copies = Copies(run, kN);
  const long got = std::count(copies.begin(), copies.end(), 1);
  EXPECT_EQ(std::count(copies.begin(), copies.end(), 2), 0)
      << "no duplicates without dup_rate";
  // Binomial(200, 0.5): mean 100, sd 7.1; [60, 140] is beyond 5.6 sd.
  EXPECT_GE(got, 60);
  EXPECT_LE(got, 140);
  EXPECT_EQ(copies, ExpectedCopies(7, kN, 500, 0)) << "decisions as documented";
}

TEST_F(ChaosTest, SameSeedSameDecisions) {
  Params p;
  p.drop_rate = 300;
  p.dup_rate = 300;
  p.delay_us_max = 300;
  p.seed = "99";
  Received first, second, other;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, kN, &first));
  ASSERT_NO_FATAL_FAILURE(Exchange(p, kN, &second));
  p.seed = "100";
  ASSERT_NO_FATAL_FAILURE(Exchange(p, kN, &other));
  EXPECT_EQ(Copies(first, kN), Copies(second, kN)) << "seed 99 twice";
  EXPECT_EQ(Copies(first, kN), ExpectedCopies(99, kN, 300, 300));
  EXPECT_EQ(Copies(other, kN), ExpectedCopies(100, kN, 300, 300));
  EXPECT_NE(Copies(first, kN), Copies(other, kN)) << "seeds 99 and 100";
  EXPECT_NE(first.description.find("seed=99 "), std::string::npos);
}

TEST_F(ChaosTest, HeldArrivalsWakeTheHost) {
  Params p;
  p.seed = "5";
  p.delay_us_max = 50000;  // up to 50 ms: most are still held when sending ends
  Options opt;
  opt.receiver_sleeps_on_fd = true;
  Received run;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, 50, &run, opt));
  EXPECT_EQ(run.arrivals, 50u);
}

TEST_F(ChaosTest, SegmentsOverMaxInlineSizeArePlaced) {
  Params p;
  p.seed = "11";
  p.delay_us_max = 500;
  p.max_inline_size = 1024;  // the 64 KiB segments arrive not inline
  Options opt;
  opt.short_place_first = true;
  Received run;
  ASSERT_NO_FATAL_FAILURE(Exchange(p, 40, &run, opt));
  EXPECT_EQ(run.arrivals, 40u);
  EXPECT_EQ(run.placed_not_inline, 4u);  // messages 0, 10, 20, 30
  EXPECT_NE(run.description.find("max_inline_size=1024"), std::string::npos);
}

TEST_F(ChaosTest, CloseDropsHeldArrivals) {
  // The receiver closes while chaos holds arrivals: none is returned after
  // close(), and CLOSED is the connection's last event.
  Params p;
  p.seed = "13";
  p.delay_us_max = 5 * 1000 * 1000;  // held for up to 5 s
  Apply(p);
  auto recv = Open("chaos");
  ASSERT_NE(recv, nullptr);
  auto send = Open("tcp");
  ASSERT_NE(send, nullptr);
  ferry_listener_t* listener = nullptr;
  ASSERT_TRUE(recv->t().Listen("", nullptr, &listener).ok());
  auto address = recv->t().ListenerAddress(listener);
  ASSERT_TRUE(address.ok());
  ferry_conn_t* sconn = nullptr;
  ASSERT_TRUE(send->t().Connect(address.value(), nullptr, &sconn).ok());
  ferry_conn_t* rconn = nullptr;
  size_t done = 0;
  std::vector<unsigned char> header(8, 1);
  auto take = [&](Endpoint* e, int32_t type) {
    for (auto it = e->events().begin(); it != e->events().end(); ++it) {
      if (it->type == type) {
        Event ev = *it;
        e->events().erase(it);
        return ev;
      }
    }
    return Event();
  };
  ASSERT_TRUE(Pump({recv.get(), send.get()}, [&] {
    if (rconn == nullptr) rconn = take(recv.get(), FERRY_EV_ACCEPTED).conn;
    return rconn != nullptr;
  }));
  for (int i = 0; i < 10; ++i) {
    ferry_send_args_t sa{};
    sa.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
    sa.header = header.data();
    sa.header_len = header.size();
    ASSERT_TRUE(send->t().Send(sconn, sa).ok());
  }
  ASSERT_TRUE(Pump({recv.get(), send.get()}, [&] {
    while (take(send.get(), FERRY_EV_SEND_DONE).type != 0) ++done;
    return done == 10;
  }));
  // Let chaos take the arrivals from tcp (it then holds them).
  for (int i = 0; i < 5; ++i) recv->PollOnce();
  recv->t().Close(rconn);
  recv->events().clear();
  bool closed = false;
  ASSERT_TRUE(Pump({recv.get()}, [&] {
    for (const Event& e : recv->events()) {
      EXPECT_FALSE(closed) << "an event after CLOSED";
      EXPECT_NE(e.type, FERRY_EV_ARRIVAL) << "an ARRIVAL after close()";
      if (e.type == FERRY_EV_CLOSED) closed = true;
    }
    recv->events().clear();
    return closed;
  }));
  send->t().Close(sconn);
  ASSERT_TRUE(
      Pump({send.get()}, [&] { return take(send.get(), FERRY_EV_CLOSED).type != 0; }));
  recv->t().CloseListener(listener);
}

TEST_F(ChaosTest, ClearErrorsForBadSetups) {
  Params p;
  p.inner = "nonexistent";
  Apply(p);
  auto plugin = Load("chaos");
  ASSERT_NE(plugin, nullptr);
  auto t = ferry::Transport::Open(plugin, 0, "bad");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), FERRY_NOT_FOUND) << t.status().ToString();
  EXPECT_NE(t.status().message().find("libferry-nonexistent.so"), std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("tcp"), std::string::npos)
      << "the message lists the plugins that are there: " << t.status().message();

  p.inner = "chaos";
  Apply(p);
  t = ferry::Transport::Open(plugin, 0, "bad");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(t.status().message().find("itself"), std::string::npos)
      << t.status().message();

  p.inner = std::string(FERRY_CHAOS_PLUGIN_DIR) + "/libferry-chaos.so";  // by path
  Apply(p);
  t = ferry::Transport::Open(plugin, 0, "bad");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(t.status().message().find("itself"), std::string::npos)
      << t.status().message();

  p = Params();
  p.dup_rate = 1001;
  Apply(p);
  t = ferry::Transport::Open(plugin, 0, "bad");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(t.status().message().find("FERRY_CHAOS_DUP_RATE"), std::string::npos)
      << t.status().message();

  p = Params();
  p.seed = "not-a-number";
  Apply(p);
  t = ferry::Transport::Open(plugin, 0, "bad");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("FERRY_CHAOS_SEED"), std::string::npos)
      << t.status().message();
}

}  // namespace
