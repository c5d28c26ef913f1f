// ferry-test-worker: a real worker process for the multi-process tests
// (worker_process_test.cc) and the demo's scripted peers. It joins a job,
// registers a few functions, prints "READY <id>" and serves until its stdin
// closes (then it leaves gracefully) or it is killed.
//
//   ferry-test-worker --name NAME --store HOST:PORT [--job J] [--secret S]
//                     [--peer-timeout-ms N] [--transport T]
//
// Functions: echo (returns its bytes and tensors), hold (answers only when
// the process dies: for peer-death tests; prints "HELD"), make (returns
// "made:<bytes>"), keep (keeps the RRefs it is given; prints "KEPT n"),
// stats ("owned=<n> users=<n> children=<n>"), forward ("<to>" + RRefs:
// passes its RRefs on to <to>'s "keep"), call ("<to> <function> <bytes>":
// calls <function> on <to> with those bytes and this call's tensors, and
// answers with its result: how a C++ worker calls a Python one).
// Typed functions (ferry/typed.hpp): typed_add (int64, int64) -> int64,
// typed_scale (tensor of float32, float64) -> tensor, typed_describe
// (string, list[int64], map[string, float64]) -> string, typed_fail () ->
// NOT_FOUND, typed_sleep (int64 ms) -> int64 (may block).
#include <ferry/ferry.hpp>
#include <ferry/typed.hpp>

#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  ferry::Worker::Options o;
  o.transport = "tcp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--name")
      o.name = v;
    else if (k == "--store")
      o.store = v;
    else if (k == "--job")
      o.job = v;
    else if (k == "--secret")
      o.secret = argv[i + 1];
    else if (k == "--transport")
      o.transport = v;
    else if (k == "--peer-timeout-ms")
      o.peer_timeout = std::chrono::milliseconds(std::stoi(v));
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    ferry::Worker w(o);
    std::mutex mu;
    std::vector<ferry::Call> held;
    std::vector<ferry::RRef> kept;
    w.Register("echo", [](ferry::Call& call, ferry::Message args) {
      ferry::Payload out{std::string(args.bytes())};
      for (uint32_t i = 0; i < args.num_tensors(); ++i) out.Tensor(args.TakeTensor(i));
      call.Reply(std::move(out));
    });
    w.Register("hold", [&](ferry::Call& call, ferry::Message) {
      std::lock_guard<std::mutex> l(mu);
      held.push_back(std::move(call));
      std::printf("HELD\n");
      std::fflush(stdout);
    });
    w.Register("make", [](ferry::Call& call, ferry::Message args) {
      call.Reply(ferry::Payload("made:" + std::string(args.bytes())));
    });
    w.Register("keep", [&](ferry::Call& call, ferry::Message args) {
      std::lock_guard<std::mutex> l(mu);
      for (uint32_t i = 0; i < args.num_rrefs(); ++i) kept.push_back(args.TakeRRef(i));
      std::printf("KEPT %zu\n", kept.size());
      std::fflush(stdout);
      call.Reply();
    });
    w.Register("stats", [&](ferry::Call& call, ferry::Message) {
      auto s = w.Stats();
      call.Reply(ferry::Payload("owned=" + std::to_string(s.owned_rrefs) +
                                " users=" + std::to_string(s.user_rrefs) +
                                " children=" + std::to_string(s.pending_children)));
    });
    ferry::Worker* self = &w;
    w.Register(
        "forward",
        [self](ferry::Call& call, ferry::Message args) {
          ferry::Payload p;
          std::vector<ferry::RRef> refs;
          for (uint32_t i = 0; i < args.num_rrefs(); ++i)
            refs.push_back(args.TakeRRef(i));
          for (auto& r : refs) p.Ref(r);
          self->RpcSync(std::string(args.bytes()), "keep", std::move(p));
          call.Reply();
        },
        FERRY_HANDLER_MAY_BLOCK);
    w.Register(
        "call",
        [self](ferry::Call& call, ferry::Message args) {
          const std::string spec(args.bytes());
          const size_t a = spec.find(' '), b = spec.find(' ', a + 1);
          if (a == std::string::npos || b == std::string::npos) {
            call.Fail(FERRY_INVALID_ARGUMENT, "call wants \"<to> <function> <bytes>\"");
            return;
          }
          ferry::Payload p{spec.substr(b + 1)};
          for (uint32_t i = 0; i < args.num_tensors(); ++i) p.Tensor(args.TakeTensor(i));
          try {
            ferry::Message r = self->RpcSync(spec.substr(0, a),
                                             spec.substr(a + 1, b - a - 1), std::move(p));
            ferry::Payload out{std::string(r.bytes())};
            for (uint32_t i = 0; i < r.num_tensors(); ++i) out.Tensor(r.TakeTensor(i));
            call.Reply(std::move(out));
          } catch (const ferry::Error& e) {
            call.Fail(e.code(), e.what());
          }
        },
        FERRY_HANDLER_MAY_BLOCK);
    ferry::Define(w, "typed_add", [](int64_t a, int64_t b) { return a + b; });
    ferry::Define(w, "typed_scale", [](ferry::Tensor t, double by) {
      if (t.dl().dtype.code != kDLFloat || t.dl().dtype.bits != 32) {
        throw ferry::Error(FERRY_INVALID_ARGUMENT, "typed_scale wants float32");
      }
      float* x = t.data<float>();  // ours: received into this process's memory
      for (int64_t i = 0; i < t.numel(); ++i) x[i] = static_cast<float>(x[i] * by);
      return t;
    });
    ferry::Define(w, "typed_describe",
                  [](const std::string& who, const std::vector<int64_t>& xs,
                     const std::map<std::string, double>& weights) {
                    int64_t sum = 0;
                    for (int64_t x : xs) sum += x;
                    double total = 0;
                    for (const auto& [k, v] : weights) total += v;
                    return who + ": " + std::to_string(xs.size()) + " values, sum " +
                           std::to_string(sum) + ", " + std::to_string(weights.size()) +
                           " weights, total " + std::to_string(static_cast<int>(total));
                  });
    ferry::Define(w, "typed_fail", []() -> int64_t {
      throw ferry::Error(FERRY_NOT_FOUND, "typed_fail: nothing here, on purpose");
    });
    ferry::Define(
        w, "typed_sleep",
        [](int64_t ms) {
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
          return ms;
        },
        FERRY_HANDLER_MAY_BLOCK);
    std::printf("READY %llu\n", static_cast<unsigned long long>(w.id()));
    std::fflush(stdout);
    char buf[256];
    while (read(0, buf, sizeof buf) > 0) {
    }
    {
      std::lock_guard<std::mutex> l(mu);
      held.clear();
      kept.clear();
    }
    w.Shutdown(std::chrono::milliseconds(2000));
    return 0;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry-test-worker %s: %s\n", o.name.c_str(), e.what());
    return 1;
  }
}
