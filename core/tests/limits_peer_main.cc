// ferry-limits-peer: the flooding peer of limits_test.cc, a real worker
// process. It joins a job, registers "sink" (answers at once, with
// nothing), prints "READY", then runs the commands it reads on stdin, one
// a line, until stdin closes:
//
//   flood <to> <function> <count> <bytes> <timeout_ms>
//     Makes <count> calls of <bytes> bytes each to <to>'s <function> with
//     rpc_async as fast as it returns, then prints "SENT <ms>" (how long
//     making them took: back-pressure shows here), "HALF_REFUSED" once half
//     of them failed with RESOURCE_EXHAUSTED, and when every call ended
//     "RESULT ok=<n> exhausted=<n> deadline=<n> other=<n>", then
//     "EXHAUSTED <first such message>" and "OTHER <first other message>"
//     where there were any.
//   big <to> <function> <bytes>
//     One call of <bytes> bytes; prints "BIG <STATUS_NAME> <message>".
//
//   ferry-limits-peer --name N --store HOST:PORT --job J --secret S
//                     [--max-calls-in-flight N] [--max-message-size N]
//                     [--peer-timeout-ms N]
#include <ferry/ferry.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::mutex g_out_mu;

void Say(const std::string& line) {
  std::lock_guard<std::mutex> l(g_out_mu);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

void Flood(ferry::Worker& w, const std::string& to, const std::string& function,
           int count, size_t bytes, int timeout_ms) {
  struct Tally {
    std::atomic<int> ok{0}, exhausted{0}, deadline{0}, other{0}, ended{0};
    std::atomic<bool> half_said{false};
    std::mutex mu;
    std::string first_exhausted, first_other;
  };
  auto tally = std::make_shared<Tally>();
  std::vector<std::unique_ptr<ferry::Future>> futures;
  futures.reserve(static_cast<size_t>(count));
  const std::string payload(bytes, 'f');
  const auto began = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    auto f = std::make_unique<ferry::Future>(w.RpcAsync(
        to, function, ferry::Payload(payload), std::chrono::milliseconds(timeout_ms)));
    ferry::Future* raw = f.get();
    raw->Then([tally, raw, count] {
      std::string msg;
      const ferry_status_t s = raw->status(&msg);
      if (s == FERRY_OK) {
        tally->ok.fetch_add(1);
      } else if (s == FERRY_RESOURCE_EXHAUSTED) {
        {
          std::lock_guard<std::mutex> l(tally->mu);
          if (tally->first_exhausted.empty()) tally->first_exhausted = msg;
        }
        if (tally->exhausted.fetch_add(1) + 1 >= count / 2 &&
            !tally->half_said.exchange(true)) {
          Say("HALF_REFUSED");
        }
      } else {
        (s == FERRY_DEADLINE_EXCEEDED ? tally->deadline : tally->other).fetch_add(1);
        std::lock_guard<std::mutex> l(tally->mu);
        if (tally->first_other.empty()) {
          tally->first_other = std::string(ferry_status_name(s)) + ": " + msg;
        }
      }
      tally->ended.fetch_add(1);
    });
    futures.push_back(std::move(f));
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - began)
                      .count();
  Say("SENT " + std::to_string(ms));
  // Every call has a deadline: each future ends by then at the latest.
  for (auto& f : futures) f->Wait(std::chrono::milliseconds(timeout_ms + 60000));
  while (tally->ended.load() < count) {
    // Then() runs on the completing thread, possibly just after Wait saw
    // the future done: its tally follows at once.
    std::this_thread::yield();
  }
  Say("RESULT ok=" + std::to_string(tally->ok.load()) +
      " exhausted=" + std::to_string(tally->exhausted.load()) +
      " deadline=" + std::to_string(tally->deadline.load()) +
      " other=" + std::to_string(tally->other.load()));
  std::lock_guard<std::mutex> l(tally->mu);
  if (!tally->first_exhausted.empty())
    Say("EXHAUSTED " + OneLine(tally->first_exhausted));
  if (!tally->first_other.empty()) Say("OTHER " + OneLine(tally->first_other));
}

void Big(ferry::Worker& w, const std::string& to, const std::string& function,
         size_t bytes) {
  ferry::Future f = w.RpcAsync(to, function, ferry::Payload(std::string(bytes, 'b')),
                               std::chrono::milliseconds(20000));
  f.Wait(std::chrono::milliseconds(60000));
  std::string msg;
  const ferry_status_t s = f.status(&msg);
  Say(std::string("BIG ") + ferry_status_name(s) + " " + OneLine(msg));
}

}  // namespace

int main(int argc, char** argv) {
  ferry::Worker::Options o;
  o.transport = "tcp";
  std::string secret;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--name") {
      o.name = v;
    } else if (k == "--store") {
      o.store = v;
    } else if (k == "--job") {
      o.job = v;
    } else if (k == "--secret") {
      secret = v;
    } else if (k == "--max-calls-in-flight") {
      o.limits.max_calls_in_flight_per_peer = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--peer-timeout-ms") {
      o.peer_timeout = std::chrono::milliseconds(std::stoi(v));
    } else if (k == "--max-message-size") {
      o.limits.max_message_size = std::stoull(v);
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  o.secret = secret.c_str();
  try {
    ferry::Worker w(o);
    w.Register("sink", [](ferry::Call& call, ferry::Message) { call.Reply(); });
    Say("READY");
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream in(line);
      std::string cmd, to, function;
      in >> cmd >> to >> function;
      if (cmd == "flood") {
        int count = 0, timeout_ms = 0;
        size_t bytes = 0;
        in >> count >> bytes >> timeout_ms;
        Flood(w, to, function, count, bytes, timeout_ms);
      } else if (cmd == "big") {
        size_t bytes = 0;
        in >> bytes;
        Big(w, to, function, bytes);
      } else {
        Say("UNKNOWN " + cmd);
      }
    }
    w.Shutdown(std::chrono::milliseconds(5000));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-limits-peer: %s\n", e.what());
    return 1;
  }
  return 0;
}
