// ferry-static-worker: a worker process for the static-job tests
// (static_job_test.cc), written on the C++ API. It starts (in a static job
// when given --world-size or WORLD_SIZE / RANK in its environment), prints
// "STARTED rank=<r> world=<w> id=<id>" (or "START_FAILED <STATUS> <message>"
// and exits 1), then runs the commands it reads on stdin, one a line:
//
//   shutdown <timeout_ms|none>   graceful shutdown (a static job's barrier)
//   immediate                    non-graceful shutdown
//   call <to> <function> <bytes> rpc_sync; "CALL OK <result>" or
//                                "CALL_FAILED <STATUS> <message>"
//
// A shutdown prints "SHUTDOWN OK t=<ms>" or "SHUTDOWN_FAILED <STATUS> t=<ms>
// <message>" (t: CLOCK_MONOTONIC milliseconds when it returned, comparable
// across the processes of one machine) and exits 0. End of stdin: exits
// (the worker is destroyed: an immediate leave).
//
//   ferry-static-worker --name N --store HOST:PORT --job J [--world-size W]
//       [--rank R] [--host-store 1] [--elastic 1] [--start-timeout-ms T]
//
// Functions: echo (its bytes back), slow ("<ms>": sleeps, then "slept"),
// call ("<to> <function> <bytes>": a nested rpc_sync, its result back).
#include <ferry/ferry.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace {

long long NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  ferry::Worker::Options o;
  o.transport = "tcp";
  o.secret = "test-secret";
  o.peer_timeout = std::chrono::milliseconds(1000);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--name")
      o.name = v;
    else if (k == "--store")
      o.store = v;
    else if (k == "--job")
      o.job = v;
    else if (k == "--world-size")
      o.world_size = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--rank")
      o.rank = std::stoi(v);
    else if (k == "--host-store")
      o.host_store = v == "1";
    else if (k == "--elastic")
      o.elastic = v == "1";
    else if (k == "--start-timeout-ms")
      o.start_timeout = std::chrono::milliseconds(std::stoi(v));
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::unique_ptr<ferry::Worker> w;
  try {
    w = std::make_unique<ferry::Worker>(o);
  } catch (const ferry::Error& e) {
    Say(std::string("START_FAILED ") + ferry_status_name(e.code()) + " " + e.what());
    return 1;
  }
  ferry::Worker* self = w.get();
  w->Register("echo", [](ferry::Call& call, ferry::Message args) {
    call.Reply(ferry::Payload(std::string(args.bytes())));
  });
  w->Register(
      "slow",
      [](ferry::Call& call, ferry::Message args) {
        std::this_thread::sleep_for(std::chrono::milliseconds(
            std::stoi(std::string(args.bytes()))));  // the work a slow handler does
        call.Reply(ferry::Payload("slept"));
      },
      FERRY_HANDLER_MAY_BLOCK);
  w->Register(
      "call",
      [self](ferry::Call& call, ferry::Message args) {
        std::istringstream in{std::string(args.bytes())};
        std::string to, fn, bytes;
        in >> to >> fn >> bytes;
        try {
          ferry::Message r = self->RpcSync(to, fn, ferry::Payload(bytes));
          call.Reply(ferry::Payload(std::string(r.bytes())));
        } catch (const ferry::Error& e) {
          call.Fail(e.code(), e.what());
        }
      },
      FERRY_HANDLER_MAY_BLOCK);
  Say("STARTED rank=" + std::to_string(w->rank()) +
      " world=" + std::to_string(w->world_size()) + " id=" + std::to_string(w->id()));
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "call") {
      std::string to, fn, bytes;
      in >> to >> fn >> bytes;
      try {
        ferry::Message r = w->RpcSync(to, fn, ferry::Payload(bytes));
        Say("CALL OK " + std::string(r.bytes()));
      } catch (const ferry::Error& e) {
        Say(std::string("CALL_FAILED ") + ferry_status_name(e.code()) + " " + e.what());
      }
      continue;
    }
    if (cmd == "shutdown" || cmd == "immediate") {
      std::string t;
      in >> t;
      const auto timeout = cmd == "immediate" || t == "none" || t.empty()
                               ? ferry::kNoTimeout
                               : std::chrono::milliseconds(std::stoll(t));
      try {
        w->Shutdown(cmd == "immediate" ? ferry::ShutdownMode::kImmediate
                                       : ferry::ShutdownMode::kGraceful,
                    timeout);
        Say("SHUTDOWN OK t=" + std::to_string(NowMs()));
      } catch (const ferry::Error& e) {
        Say(std::string("SHUTDOWN_FAILED ") + ferry_status_name(e.code()) +
            " t=" + std::to_string(NowMs()) + " " + e.what());
      }
      return 0;
    }
    Say("UNKNOWN " + line);
  }
  return 0;
}
