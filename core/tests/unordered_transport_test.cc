// Connection set-up over a transport that does not keep a connection's
// order (chaos: no FERRY_CAP_ORDERED). The handshake is a request/answer
// exchange, except at its end: the acceptor sends READY and, at once, any
// calls it had queued for that peer. Those may overtake READY; the connector
// must take them as the READY they imply, not as traffic before
// authentication (refusing them would lose both workers' calls until their
// deadlines).
#include "chaos_worker_options.h"

#include <ferry/ferry.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ferry_test::ChaosWorkerOptions;

void ServeEcho(ferry::Worker& w) {
  w.Register("echo", [](ferry::Call& c, ferry::Message args) {
    c.Reply(ferry::Payload(std::string(args.bytes())));
  });
}

// Both workers call each other, the second call a little after the first,
// so that it finds the first call's connection at every step of its
// handshake across the seeds. Two faults would show here:
// - the call that followed READY overtakes it and is refused as traffic
//   before authentication;
// - the second worker opens a connection of its own while the first one's
//   is mid-handshake; both become ready, each worker keeps a different one
//   and closes the other, and each takes the other's close for its death.
TEST(UnorderedTransport, CallsQueuedBehindAHandshakeSurviveReordering) {
  setenv("FERRY_CHAOS_INNER", "tcp", 0);
  setenv("FERRY_CHAOS_DELAY_US_MAX", "3000", 1);
  setenv("FERRY_CHAOS_DUP_RATE", "150", 1);
  for (int seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("chaos seed " + std::to_string(seed));
    setenv("FERRY_CHAOS_SEED", std::to_string(seed).c_str(), 1);
    const std::string job = "unordered." + std::to_string(seed);
    ferry::Worker a(ChaosWorkerOptions("a", job, "127.0.0.1:0", true));
    ferry::Worker b(ChaosWorkerOptions("b", job, a.store_address(), false));
    ServeEcho(a);
    ServeEcho(b);
    a.WaitForWorkers(2, 10000ms);
    b.WaitForWorkers(2, 10000ms);

    std::string from_a, from_b, error_a, error_b;
    auto call = [](ferry::Worker& w, const char* to, std::string* got,
                   std::string* error) {
      try {
        ferry::Message m = w.RpcSync(to, "echo", ferry::Payload(std::string("hi ") + to));
        *got = std::string(m.bytes());
      } catch (const ferry::Error& e) {
        *error = e.what();
      }
    };
    // The second call starts up to 6 ms after the first: it then finds the
    // first one's connection anywhere in its handshake (each message is
    // delayed up to 3 ms), which is where a careless engine opens a second
    // connection and each worker takes a different one for the one.
    const bool a_first = seed % 2 == 0;
    const auto stagger = std::chrono::microseconds(500 * (seed / 2));
    std::thread first = a_first ? std::thread(call, std::ref(a), "b", &from_a, &error_a)
                                : std::thread(call, std::ref(b), "a", &from_b, &error_b);
    std::this_thread::sleep_for(stagger);  // an input of the test, not a wait
    std::thread second = a_first ? std::thread(call, std::ref(b), "a", &from_b, &error_b)
                                 : std::thread(call, std::ref(a), "b", &from_a, &error_a);
    first.join();
    second.join();
    EXPECT_EQ(error_a, "");
    EXPECT_EQ(error_b, "");
    EXPECT_EQ(from_a, "hi b");
    EXPECT_EQ(from_b, "hi a");
    EXPECT_EQ(a.Stats().refused_connections, 0u) << "a refused a connection from b";
    EXPECT_EQ(b.Stats().refused_connections, 0u) << "b refused a connection from a";
  }
}

}  // namespace
