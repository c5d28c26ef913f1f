// `ferry debug dump` from another process (debug_client.h).
#include "agent/debug_client.h"

#include "engine/engine.h"

#include <mutex>

namespace ferry {
namespace {

// Hears the one answer (or the connection's failure) on the store
// connection; nothing else arrives on an engine that never joined.
class DumpSink : public EngineSink {
 public:
  void OnStoreMessage(uint64_t, std::unique_ptr<InMessage> msg) override {
    if (msg->envelope.kind != wire::Kind::kDebugDumpReply) return;
    wire::Reader r(msg->body.data(), msg->body.size());
    const auto code = static_cast<ferry_status_t>(r.I32());
    std::string message = r.Str();
    std::string text = r.Str(size_t{1} << 31);
    std::lock_guard<std::mutex> l(mu_);
    if (done_) return;
    done_ = true;
    if (!r.ok()) {
      status_ =
          Status(FERRY_INTERNAL, "malformed DEBUG_DUMP reply from the store's host");
    } else if (code != FERRY_OK) {
      status_ = Status(code, message);
    } else {
      text_ = std::move(text);
    }
  }
  void OnStoreConnGone(uint64_t, const Status& why) override {
    std::lock_guard<std::mutex> l(mu_);
    if (done_) return;
    done_ = true;
    status_ = Status(why.code() == FERRY_OK ? FERRY_PEER_GONE : why.code(),
                     "the connection to the job's store closed: " + why.message());
  }
  void OnMessage(PeerKey, std::unique_ptr<InMessage>) override {}
  void OnDuplicateControl(PeerKey, const InMessage&) override {}
  void OnPeerGone(PeerKey, const Status&, bool) override {}

  bool done() {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }
  StatusOr<std::string> result() {
    std::lock_guard<std::mutex> l(mu_);
    if (!status_.ok()) return status_;
    return text_;
  }

 private:
  std::mutex mu_;
  bool done_ = false;
  Status status_;
  std::string text_;
};

}  // namespace

StatusOr<std::string> RemoteDebugDump(const RemoteDumpOptions& options) {
  if (options.secret.empty()) {
    return Status(FERRY_PERMISSION_DENIED,
                  "no job secret: a worker's debug dump is only given to a process that "
                  "proves it holds the job's secret (set FERRY_SECRET or "
                  "FERRY_SECRET_FILE as the job's workers have it)");
  }
  DumpSink sink;
  EngineOptions eo;
  eo.job = options.job;
  eo.secret = options.secret;
  eo.transports = {"tcp"};  // the store's transport
  eo.listen_address = "127.0.0.1:0";
  Engine engine(eo, &sink);
  if (Status s = engine.Start(); !s.ok()) return s;
  auto conn = engine.ConnectStore(options.store_address);
  if (!conn.ok()) return conn.status();
  auto msg = std::make_unique<OutMessage>();
  msg->kind = wire::Kind::kDebugDump;
  wire::Writer w = msg->BodyWriter();
  w.Str(options.worker);
  if (Status s = engine.SendOnConn(conn.value(), std::move(msg)); !s.ok()) return s;
  if (!engine.WaitUntil([&] { return sink.done(); },
                        std::chrono::steady_clock::now() + options.timeout)) {
    engine.Stop(std::chrono::milliseconds(0));
    return Status(FERRY_DEADLINE_EXCEEDED,
                  "no debug dump of '" + options.worker + "' from the store of job '" +
                      options.job + "' at " + options.store_address + " within " +
                      std::to_string(options.timeout.count()) +
                      " ms (is the job running there?)");
  }
  engine.Stop(std::chrono::milliseconds(100));
  return sink.result();
}

}  // namespace ferry
