// ferry-demo: several worker processes on this machine, loading a transport
// backend by name, calling each other, passing an RRef between three
// workers, one worker leaving and a new one joining — printed as a short
// transcript. The README's run command runs it.
//
//   ferry-demo [--transport tcp|shm|auto]     (the coordinator)
//   ferry-demo --worker NAME --store ADDR ... (spawned by the coordinator)
#include <ferry/ferry.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

extern char** environ;
using namespace std::chrono_literals;

namespace {

std::mutex print_mu;
void Say(const std::string& who, const std::string& what) {
  std::lock_guard<std::mutex> l(print_mu);
  std::printf("  %-12s %s\n", ("[" + who + "]").c_str(), what.c_str());
  std::fflush(stdout);
}

void Section(const char* title) {
  std::lock_guard<std::mutex> l(print_mu);
  std::printf("\n-- %s\n", title);
  std::fflush(stdout);
}

// ---- a worker process -------------------------------------------------------
int RunWorker(const std::string& name, const std::string& store, const std::string& job,
              const std::string& transport) {
  ferry::Worker::Options o;
  o.name = name;
  o.store = store;
  o.job = job;
  o.transport = transport;
  ferry::Worker w(o);
  ferry::Worker* self = &w;
  w.Register("greet", [name](ferry::Call& c, ferry::Message args) {
    c.Reply(ferry::Payload("hello " + std::string(args.bytes()) + ", this is " + name));
  });
  // remote() target: the value stays here; callers get an RRef.
  w.Register("make_counter", [name](ferry::Call& c, ferry::Message args) {
    Say(name, "creating a counter = " + std::string(args.bytes()) + " (I own it)");
    c.Reply(ferry::Payload(std::string(args.bytes())));
  });
  // The owner mutates its value in place.
  w.Register("increment", [name](ferry::Call& c, ferry::Message args) {
    ferry::RRef r = args.TakeRRef(0);
    uint64_t n = 0;
    char* bytes = r.MutableLocalBytes(&n);
    std::string v(bytes, n);
    const std::string next = std::to_string(std::stoi(v) + 1);
    // Same width in place when it fits; otherwise a new value.
    Say(name, "incrementing my counter in place: " + v + " -> " + next);
    if (next.size() == n) {
      std::memcpy(bytes, next.data(), n);
    } else {
      ferry::Payload p(next);
      ferry_rref_set_local_value(r.get(), p.c());
    }
    c.Reply();
  });
  // Look at an RRef's value (to_here), optionally pass it on (a fork).
  w.Register(
      "peek_and_pass",
      [name, self](ferry::Call& c, ferry::Message args) {
        ferry::RRef r = args.TakeRRef(0);
        const std::string next(args.bytes());
        Say(name, "got an RRef owned by worker #" + std::to_string(r.owner_id()) +
                      "; to_here() = " + std::string(r.ToHere().bytes()));
        if (!next.empty()) {
          Say(name, "passing it on to " + next);
          ferry::Payload p;
          p.Ref(r);
          self->RpcSync(next, "peek_and_pass", std::move(p));
        }
        c.Reply();
      },
      FERRY_HANDLER_MAY_BLOCK);
  Say(name, "joined as worker #" + std::to_string(w.id()) + " over '" + transport + "'");
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  Say(name, "leaving the job");
  w.Shutdown(2000ms);
  return 0;
}

// ---- the coordinator ----------------------------------------------------------
struct Child {
  pid_t pid = -1;
  int in = -1;
};

Child Spawn(const char* self, const std::string& name, const std::string& store,
            const std::string& job, const std::string& transport) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) std::abort();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  std::vector<std::string> args = {self,    "--worker", name,          "--store", store,
                                   "--job", job,        "--transport", transport};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child c;
  if (posix_spawn(&c.pid, self, &fa, nullptr, argv.data(), environ) != 0) std::abort();
  posix_spawn_file_actions_destroy(&fa);
  close(p[0]);
  c.in = p[1];
  return c;
}

void Leave(Child& c) {
  close(c.in);
  waitpid(c.pid, nullptr, 0);
}

const char* StateName(int32_t s) {
  return s == FERRY_MEMBER_ALIVE ? "joined" : s == FERRY_MEMBER_LEFT ? "left" : "is gone";
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt;
  for (int i = 1; i + 1 < argc; i += 2) opt[argv[i]] = argv[i + 1];
  const std::string transport = opt.count("--transport") ? opt["--transport"] : "tcp";
  const std::string job =
      opt.count("--job") ? opt["--job"] : "demo-" + std::to_string(getpid());
  if (opt.count("--worker"))
    return RunWorker(opt["--worker"], opt["--store"], job, transport);

  // A job secret for this run, handed to the workers it starts (a real job
  // would use FERRY_SECRET_FILE).
  if (std::getenv("FERRY_SECRET") == nullptr &&
      std::getenv("FERRY_SECRET_FILE") == nullptr) {
    setenv("FERRY_SECRET",
           ("demo-" + std::to_string(getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()))
               .c_str(),
           1);
  }
  try {
    std::printf("ferry demo: workers on this machine over transport '%s'\n\n",
                transport.c_str());
    ferry::Worker::Options o;
    o.name = "coordinator";
    o.job = job;
    o.transport = transport;
    o.store = "127.0.0.1:0";
    o.host_store = true;
    ferry::Worker me(o);
    me.OnMembership([](const ferry::MemberView& m) {
      Say("coordinator", "membership: '" + m.name + "' (#" + std::to_string(m.id) +
                             ", incarnation " + std::to_string(m.incarnation) + ") " +
                             StateName(m.state));
    });
    Say("coordinator", "hosting the job's store at " + me.store_address());

    std::map<std::string, Child> kids;
    for (const char* name : {"alice", "bob", "carol"}) {
      kids[name] = Spawn(argv[0], name, me.store_address(), job, transport);
    }
    me.WaitForWorkers(4, 20000ms);
    Section("calls by name");
    for (const char* name : {"alice", "bob", "carol"}) {
      Say("coordinator",
          std::string(me.RpcSync(name, "greet", ferry::Payload("coordinator")).bytes()));
    }
    for (const auto& m : me.Members()) {
      if (m.name != "coordinator")
        Say("coordinator", "'" + m.name + "' is reached over " + m.transport);
    }

    Section("an RRef owned by bob, shared coordinator -> alice -> carol");
    {
      ferry::RRef counter = me.Remote("bob", "make_counter", ferry::Payload("41"));
      Say("coordinator", "remote() returned at once: an RRef owned by worker #" +
                             std::to_string(counter.owner_id()));
      ferry::Payload p("carol");
      p.Ref(counter);
      me.RpcSync("alice", "peek_and_pass", std::move(p));
      ferry::Payload inc;
      inc.Ref(counter);
      me.RpcSync("bob", "increment", std::move(inc));
      Say("coordinator", "to_here() after the owner's update = " +
                             std::string(counter.ToHere().bytes()));
    }
    Say("coordinator", "released the RRef; bob frees the value once every fork is gone");

    Section("carol leaves, dave joins late");
    Leave(kids["carol"]);
    kids.erase("carol");
    kids["dave"] = Spawn(argv[0], "dave", me.store_address(), job, transport);
    Say("coordinator",
        std::string(
            me.RpcSync("dave", "greet", ferry::Payload("coordinator"), 20000ms).bytes()));
    try {
      me.RpcSync("carol", "greet", ferry::Payload("x"), 2000ms);
    } catch (const ferry::Error& e) {
      Say("coordinator", std::string("calling carol now: ") + e.what());
    }

    Section("shutting down");
    for (auto& [name, c] : kids) Leave(c);
    me.Shutdown(2000ms);
    std::printf("\nferry demo: done\n");
    return 0;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry demo failed: %s\n", e.what());
    return 1;
  }
}
