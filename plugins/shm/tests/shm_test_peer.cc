// The shm tests' peer process (exec'ed by the tests, never forked): it loads
// the plugin through the production loader and plays the remote end,
// reporting by lines on stdout. Modes:
//   listen-echo            listen on "" (FERRY_SHM_SOCKET_DIR), print
//                          "listening <address>", accept one connection,
//                          print "accepted", echo every message back
//   listen-send-big <n>    listen as above, accept one, post one n-byte
//                          message (pattern seed 7), print "posted",
//                          progress (answering nothing) until killed
//   echo <address>         connect, print "connected", echo
//   send-big <address> <n> connect, post one n-byte message (pattern seed
//                          7), print "posted", progress until killed
//   connect <address> [uid] optionally drop to `uid` first, connect, print
//                          "result <status code> <message>", exit
#include "shm_test_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace ferry_shm_test;

namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Die(const std::string& why) {
  Say("error " + why);
  return 1;
}

// Echoes every message back on `conn` until the connection breaks.
int Echo(Endpoint* ep, ferry_conn_t* conn) {
  struct Msg {
    std::string header;
    std::vector<std::vector<unsigned char>> segs;
  };
  std::map<uintptr_t, std::unique_ptr<Msg>> placing, sending;
  uintptr_t next = 1;
  auto send_back = [&](std::unique_ptr<Msg> m) -> bool {
    std::vector<std::pair<const void*, uint64_t>> segs;
    for (auto& s : m->segs) segs.emplace_back(s.data(), s.size());
    uintptr_t id = next++;
    for (;;) {
      Status st = ep->Send(conn, m->header, segs, reinterpret_cast<void*>(id));
      if (st.ok()) break;
      if (st.code() != FERRY_UNAVAILABLE) return false;
      ep->PollOnce();
    }
    sending[id] = std::move(m);
    return true;
  };
  for (;;) {
    ep->PollOnce();
    Event ev;
    while (!ep->events().empty()) {
      ev = std::move(ep->events().front());
      ep->events().pop_front();
      if (ev.type == FERRY_EV_CONN_BROKEN) return 0;
      if (ev.type == FERRY_EV_SEND_DONE) {
        sending.erase(reinterpret_cast<uintptr_t>(ev.user_data));
      } else if (ev.type == FERRY_EV_PLACE_DONE) {
        auto it = placing.find(reinterpret_cast<uintptr_t>(ev.user_data));
        if (it == placing.end()) continue;
        std::unique_ptr<Msg> m = std::move(it->second);
        placing.erase(it);
        if (ev.status != FERRY_OK || !send_back(std::move(m))) return 0;
      } else if (ev.type == FERRY_EV_ARRIVAL) {
        auto m = std::make_unique<Msg>();
        m->header.assign(ev.header.begin(), ev.header.end());
        std::vector<void*> dests;
        bool all_inline = true;
        for (auto& s : ev.segments) {
          m->segs.emplace_back(s.length);
          dests.push_back(m->segs.back().data());
          all_inline &= s.inline_data != nullptr;
        }
        if (all_inline) {
          for (size_t i = 0; i < ev.segments.size(); ++i) {
            if (ev.segments[i].length)
              std::memcpy(dests[i], ev.segments[i].inline_data, ev.segments[i].length);
          }
          ep->t().Discard(conn, ev.msg_id);
          if (!send_back(std::move(m))) return 0;
        } else {
          uintptr_t id = next++;
          if (!ep->PlaceAll(ev, dests, reinterpret_cast<void*>(id)).ok()) return 1;
          placing[id] = std::move(m);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Die("usage: shm_test_peer MODE [ARGS]");
  const std::string mode = argv[1];
  if (mode == "connect" && argc > 3) {
    uid_t uid = static_cast<uid_t>(std::atoi(argv[3]));
    if (setgid(uid) != 0 || setuid(uid) != 0) return Die("setuid failed");
  }
  std::string why;
  auto ep = Endpoint::Open(0, &why);
  if (!ep) return Die(why);
  if (mode == "listen-echo" || mode == "listen-send-big") {
    ferry_listener_t* l = nullptr;
    std::string addr = ep->Listen(&l);
    if (addr.empty()) return Die("listen failed");
    Say("listening " + addr);
    Event ev;
    if (!PumpUntil(
            {ep.get()}, [&] { return ep->TryTake(FERRY_EV_ACCEPTED, &ev); }, 30000)) {
      return Die("no connection");
    }
    Say("accepted");
    if (mode == "listen-echo") return Echo(ep.get(), ev.conn);
    if (argc < 3) return Die("missing size");
    std::vector<unsigned char> data(std::strtoull(argv[2], nullptr, 0));
    FillPattern(data.data(), data.size(), 7);
    if (!ep->Send(ev.conn, "big", {{data.data(), data.size()}}).ok())
      return Die("send failed");
    Say("posted");
    for (;;) ep->PollOnce();
  }
  if (argc < 3) return Die("missing address");
  const std::string address = argv[2];
  ferry_conn_t* conn = ep->Connect(address);
  if (conn == nullptr) return Die("connect refused");
  Event ev;
  if (!PumpUntil({ep.get()}, [&] { return ep->TryTake(FERRY_EV_CONNECTED, &ev); })) {
    return Die("no CONNECTED");
  }
  if (mode == "connect") {
    Say("result " + std::to_string(ev.status) + " " + ev.message);
    return 0;
  }
  if (ev.status != FERRY_OK) return Die("connect failed: " + ev.message);
  if (mode == "echo") {
    Say("connected");
    return Echo(ep.get(), conn);
  }
  if (mode == "send-big" && argc > 3) {
    std::vector<unsigned char> data(std::strtoull(argv[3], nullptr, 0));
    FillPattern(data.data(), data.size(), 7);
    if (!ep->Send(conn, "big", {{data.data(), data.size()}}).ok())
      return Die("send failed");
    Say("posted");
    for (;;) ep->PollOnce();
  }
  return Die("unknown mode " + mode);
}
