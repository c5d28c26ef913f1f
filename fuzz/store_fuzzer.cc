// The rendezvous store's protocol (core/membership/store_server.h): the
// embedded store of a job (elastic, or static with a world size the input
// picks) fed what its clients send on up to four connections (JOIN, LEAVE,
// ARRIVE, any other kind, with bodies from the input), their connections
// breaking, and the hosting worker's own join, leave and arrival. Every
// message the store sends back must decode with the decoder its clients run
// (StoreClient::OnMessage): the store never answers with what its clients
// would drop.
#include "fuzz_input.h"

#include "common/log.h"
#include "membership/store_server.h"

namespace {

using namespace ferry;

void CheckReply(uint64_t conn, std::unique_ptr<OutMessage> msg) {
  FUZZ_CHECK(conn >= 1 && conn <= 4);
  wire::Reader r(msg->body_data(), msg->body_size());
  if (msg->kind == wire::Kind::kStoreJoined) {
    wire::StoreJoined joined;
    FUZZ_CHECK(wire::Get(r, &joined));
    FUZZ_CHECK(r.remaining() == 0);
  } else {
    FUZZ_CHECK(msg->kind == wire::Kind::kStoreMemberEvent);
    wire::StoreMemberEvent ev;
    FUZZ_CHECK(wire::Get(r, &ev));
    FUZZ_CHECK(r.remaining() == 0);
  }
}

InMessage Message(wire::Kind kind, std::string_view body) {
  InMessage m;
  m.envelope.kind = kind;
  m.body.assign(body.begin(), body.end());
  return m;
}

wire::MemberRecord HostRecord(std::string_view bytes) {
  wire::MemberRecord r;
  wire::Reader rd(bytes.data(), bytes.size());
  if (!wire::Get(rd, &r)) r = wire::MemberRecord{};
  r.rank = bytes.empty() ? 0 : static_cast<int8_t>(bytes.back());
  if (r.name.empty()) r.name = "host";
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    log::SetLevel(FERRY_LOG_ERROR);
    return true;
  }();
  (void)quiet;
  ferry_fuzz::Input in(data, size);
  StoreServer::Hooks hooks;
  hooks.send = CheckReply;
  hooks.local_event = [](const wire::StoreMemberEvent&) {};
  StoreServer store(hooks, in.Byte() % 5);
  while (!in.empty()) {
    const uint8_t op = in.Byte();
    const uint64_t conn = 1 + (op & 3);
    switch ((op >> 2) % 7) {
      case 0:
        store.OnMessage(conn, Message(wire::Kind::kStoreJoin, in.Frame()));
        break;
      case 1:
        store.OnMessage(conn, Message(wire::Kind::kStoreLeave, in.Frame()));
        break;
      case 2:
        store.OnMessage(conn, Message(wire::Kind::kStoreArrive, in.Frame()));
        break;
      case 3: {
        const auto kind = static_cast<wire::Kind>(in.Byte());
        store.OnMessage(conn, Message(kind, in.Frame()));
        break;
      }
      case 4:
        store.OnConnGone(conn, Status(FERRY_PEER_GONE, "fuzz: connection lost"));
        break;
      case 5: {
        auto joined = store.Join(HostRecord(in.Frame()));
        if (joined.ok()) FUZZ_CHECK(joined.value().self.id != 0);
        break;
      }
      default: {
        const uint64_t id = in.Byte() % 8;
        if (op & 0x80) {
          store.Leave(id);
        } else {
          store.Arrive(id);
        }
        store.AliveOthers(id);
        break;
      }
    }
  }
  return 0;
}
