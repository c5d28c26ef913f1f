// ERR-*: failures explain themselves. Every failing status that crosses the
// ABI carries a non-empty message (an event's `message`, or the caller's
// error buffer), and a callee writes only inside the capacity it was given.
// These tests call the vtable directly with their own error buffers, so the
// wrapper cannot paper over a silent plugin.
#include "harness/conformance_test.h"

namespace ferry::conformance {
namespace {

class ErrorTest : public ConformanceTest {
 protected:
  const ferry_transport_vtable_t* vt() const { return plugin()->vtable(); }
};

// A caller-owned error buffer of `capacity` bytes followed by canaries.
class ErrBuf {
 public:
  explicit ErrBuf(size_t capacity) : bytes_(capacity + 32), capacity_(capacity) {
    FillCanary(bytes_.data(), bytes_.size());
    if (capacity > 0) bytes_[0] = '\0';
    err_.struct_size = FERRY_ERROR_BUF_STRUCT_SIZE;
    err_.data = reinterpret_cast<char*>(bytes_.data());
    err_.capacity = capacity;
  }
  ferry_error_buf_t* get() { return &err_; }
  // The message, or "" when nothing (or no terminated string) was written.
  std::string text() const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (bytes_[i] == '\0')
        return std::string(reinterpret_cast<const char*>(bytes_.data()), i);
    }
    return "";
  }
  bool terminated() const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (bytes_[i] == '\0') return true;
    }
    return false;
  }
  bool tail_intact() const { return CanaryDamage(bytes_.data() + capacity_, 32) == -1; }

 private:
  std::vector<unsigned char> bytes_;
  size_t capacity_;
  ferry_error_buf_t err_{};
};

TEST_P(ErrorTest, FailingEventsCarryMessages) {
  // Provoke failing events of each kind; the pump fails the test on any
  // failing event with an empty message (INV-4), here and everywhere else.
  int failing = 0;
  // 1. A connect to a closed listener.
  std::string address;
  ferry_listener_t* listener = Listen(a(), &address);
  ASSERT_NE(listener, nullptr);
  CloseListener(a(), listener);
  void* cc = nullptr;
  if (ferry_conn_t* conn = StartConnect(b(), address, &cc)) {
    ASSERT_TRUE(WaitDone(cc, "CONNECTED to a closed listener"));
    if (tracker().StatusOf(cc) != FERRY_OK) {
      ++failing;
      EXPECT_FALSE(tracker().MessageOf(cc).empty());
    }
    CloseConn(conn);
  }
  // 2. Sends cancelled by close(), and 3. the peer's side breaking.
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  NewInbox(link.server);  // answer arrivals, as the core does
  std::vector<void*> sends;
  for (int i = 0; i < 4; ++i) {
    OutMessage* m = NewMessage(4000 + i, 16, {16 * kMiB});
    void* c = nullptr;
    if (TrySend(link.client, *m, &c).ok()) sends.push_back(c);
  }
  CloseConn(link.client);
  ASSERT_TRUE(WaitClosed(link.client));
  for (void* c : sends) {
    if (tracker().StatusOf(c) != FERRY_OK) {
      ++failing;
      EXPECT_FALSE(tracker().MessageOf(c).empty())
          << StatusText(tracker().StatusOf(c)) << " without a message";
    }
  }
  if (a()->HasCap(FERRY_CAP_DETECTS_PEER_DEATH)) {
    pump().RunQuietlyUntil([&] { return pump().IsBroken(link.server); }, kOpTimeout);
  }
  if (pump().IsBroken(link.server)) ++failing;
  RecordProperty("failing_events", std::to_string(failing));
  EXPECT_GT(failing, 0) << "no failing event could be provoked (connect to a closed "
                           "listener, sends cancelled by close, peer closed)";
}

TEST_P(ErrorTest, FailingCallsFillErrorBuffer) {
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  int checked = 0;
  // Runs `call` with a 256-byte buffer, an 8-byte one, a 1-byte one and
  // NULL. When the call fails, each buffer must hold a terminated message
  // within its capacity and nothing past it.
  auto check = [&](const std::string& what,
                   const std::function<ferry_status_t(ferry_error_buf_t*)>& call,
                   bool must_fail, ferry_status_t expected = FERRY_OK) {
    ErrBuf big(256);
    ferry_status_t rc = call(big.get());
    if (rc == FERRY_OK) {
      EXPECT_FALSE(must_fail) << what << " succeeded";
      return;
    }
    if (expected != FERRY_OK) {
      EXPECT_EQ(StatusText(rc), StatusText(expected)) << what;
    }
    ++checked;
    EXPECT_FALSE(big.text().empty()) << what << " failed with " << StatusText(rc)
                                     << " and left the error buffer empty";
    EXPECT_TRUE(big.tail_intact()) << what << ": wrote past the error buffer's capacity";
    for (size_t cap : {size_t(8), size_t(1)}) {
      ErrBuf small(cap);
      EXPECT_NE(call(small.get()), FERRY_OK) << what << " (capacity " << cap << ")";
      EXPECT_TRUE(small.terminated()) << what << ": with capacity " << cap
                                      << " the message must be cut and NUL-terminated";
      EXPECT_TRUE(small.tail_intact())
          << what << ": wrote past an error buffer of capacity " << cap;
    }
    EXPECT_NE(call(nullptr), FERRY_OK) << what << " with err == NULL";
  };

  static GuardedBuffer tiny(16);
  const uint64_t max = a()->info().max_message_size;
  if (max < UINT64_MAX - 1) {
    check(
        "send() of max_message_size + 1 bytes",
        [&](ferry_error_buf_t* err) {
          ferry_segment_t seg{};
          seg.struct_size = FERRY_SEGMENT_STRUCT_SIZE;
          seg.data = tiny.data();
          seg.length = max + 1;
          seg.device = {FERRY_DEVICE_CPU, 0};
          ferry_send_args_t args{};
          args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
          args.num_segments = 1;
          args.segments = &seg;
          args.segment_stride = sizeof seg;
          void* c = tracker().Begin(OpKind::kSend, link.client);
          args.user_data = c;
          ferry_status_t rc = vt()->send(link.client, &args, err);
          rc == FERRY_OK ? tracker().Posted(c) : tracker().Refused(c);
          return rc;
        },
        true, FERRY_RESOURCE_EXHAUSTED);
  }
  std::vector<unsigned char> header(a()->info().max_header_size + 1u, 0x33);
  check(
      "send() with a header of max_header_size + 1 bytes",
      [&](ferry_error_buf_t* err) {
        ferry_send_args_t args{};
        args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
        args.header = header.data();
        args.header_len = header.size();
        args.segment_stride = sizeof(ferry_segment_t);
        void* c = tracker().Begin(OpKind::kSend, link.client);
        args.user_data = c;
        ferry_status_t rc = vt()->send(link.client, &args, err);
        rc == FERRY_OK ? tracker().Posted(c) : tracker().Refused(c);
        return rc;
      },
      true, FERRY_RESOURCE_EXHAUSTED);
  check(
      "place() with a msg_id never delivered",
      [&](ferry_error_buf_t* err) {
        ferry_place_args_t args{};
        args.struct_size = FERRY_PLACE_ARGS_STRUCT_SIZE;
        args.msg_id = 0xDEADBEEF12345ULL;
        args.dest_stride = sizeof(ferry_place_dest_t);
        void* c = tracker().Begin(OpKind::kPlace, link.server);
        args.user_data = c;
        ferry_status_t rc = vt()->place(link.server, &args, err);
        rc == FERRY_OK ? tracker().Posted(c) : tracker().Refused(c);
        return rc;
      },
      true, FERRY_INVALID_ARGUMENT);
  check(
      "discard() with a msg_id never delivered",
      [&](ferry_error_buf_t* err) {
        return vt()->discard(link.server, 0xDEADBEEF12345ULL, err);
      },
      true);
  check(
      "listen() on an unusable address",
      [&](ferry_error_buf_t* err) {
        ferry_listen_args_t args{};
        args.struct_size = FERRY_LISTEN_ARGS_STRUCT_SIZE;
        args.address = "/nonexistent-ferry-conformance-dir/x/\x01:99999999";
        ferry_listener_t* l = nullptr;
        ferry_status_t rc = vt()->listen(a()->context(), &args, &l, err);
        if (rc == FERRY_OK) vt()->close_listener(l);
        return rc;
      },
      false);
  check(
      "connect() to a malformed address",
      [&](ferry_error_buf_t* err) {
        ferry_connect_args_t args{};
        args.struct_size = FERRY_CONNECT_ARGS_STRUCT_SIZE;
        args.address = "\x01\x02 malformed";
        void* c = tracker().Begin(OpKind::kConnect, nullptr);
        args.user_data = c;
        ferry_conn_t* conn = nullptr;
        ferry_status_t rc = vt()->connect(b()->context(), &args, &conn, err);
        if (rc == FERRY_OK) {
          // Accepted for later failure: track it and let teardown close it.
          tracker().Posted(c, conn);
          pump().NoteConnect(b(), conn, c);
        } else {
          tracker().Refused(c);
        }
        return rc;
      },
      false);
  // A send on a connection being closed (after close(), before CLOSED).
  CloseConn(link.client);
  check(
      "send() on a connection after close()",
      [&](ferry_error_buf_t* err) {
        ferry_send_args_t args{};
        args.struct_size = FERRY_SEND_ARGS_STRUCT_SIZE;
        args.segment_stride = sizeof(ferry_segment_t);
        void* c = tracker().Begin(OpKind::kSend, link.client);
        args.user_data = c;
        ferry_status_t rc = vt()->send(link.client, &args, err);
        rc == FERRY_OK ? tracker().Posted(c) : tracker().Refused(c);
        return rc;
      },
      true, FERRY_FAILED_PRECONDITION);
  RecordProperty("failing_calls_checked", std::to_string(checked));
  EXPECT_TRUE(WaitClosed(link.client));
}

TEST_P(ErrorTest, AddressBuffersBounded) {
  std::string address;
  ferry_listener_t* listener = Listen(a(), &address);
  ASSERT_NE(listener, nullptr);
  const size_t len = address.size();
  for (uint64_t buf_len : {uint64_t(1), uint64_t(len)}) {
    std::vector<unsigned char> buf(buf_len + 32);
    FillCanary(buf.data(), buf.size());
    ferry_status_t rc =
        vt()->listener_address(listener, reinterpret_cast<char*>(buf.data()), buf_len);
    EXPECT_EQ(StatusText(rc), StatusText(FERRY_RESOURCE_EXHAUSTED))
        << "listener_address() into " << buf_len << " bytes for a " << len
        << "-character address (plus NUL)";
    EXPECT_EQ(CanaryDamage(buf.data() + buf_len, 32), -1)
        << "listener_address() wrote past buf_len " << buf_len;
  }
  std::vector<char> exact(len + 1, 'x');
  ASSERT_EQ(vt()->listener_address(listener, exact.data(), exact.size()), FERRY_OK);
  EXPECT_EQ(std::string(exact.data()), address);

  if (!a()->Has(FERRY_VT(conn_peer_address))) return;
  Link link;
  ASSERT_TRUE(MakeLink(&link));
  auto full = b()->PeerAddress(link.client);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  std::vector<unsigned char> buf(2 + 32);
  FillCanary(buf.data(), buf.size());
  ferry_status_t rc =
      vt()->conn_peer_address(link.client, reinterpret_cast<char*>(buf.data()), 2);
  if (full.value().size() >= 2) {
    EXPECT_NE(StatusText(rc), StatusText(FERRY_OK)) << "conn_peer_address() into 2 bytes";
  }
  EXPECT_EQ(CanaryDamage(buf.data() + 2, 32), -1)
      << "conn_peer_address() wrote past buf_len 2";
}

INSTANTIATE_TEST_SUITE_P(Plugins, ErrorTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
