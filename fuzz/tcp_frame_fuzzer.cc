// The tcp plugin's frame parser (plugins/tcp/src/frame_parser.h): a byte
// stream as it comes off a socket, the peer's hello and then message frames
// back to back, parsed as the receive path does (receive.cc) under this
// side's default receive limits, or small ones the input picks. Besides
// ASan/UBSan, checked: a complete message's header and inline segments lie
// inside the bytes it said it needs, a parse of fewer bytes than those asks
// for more (never fails nor succeeds), and kNeedMore asks for more than it had.
#include "fuzz_input.h"

#include "frame_parser.h"

namespace {

using namespace ferry_tcp;

// This side's limits: a default context's, or small ones.
ReceiveLimits Limits(bool small) {
  if (!small) return LimitsOf(Config{});
  ReceiveLimits l;
  l.max_header = 64;
  l.max_segments = 4;
  l.inline_limit = 32;
  l.inline_total = 64;
  l.max_message = 4096;
  return l;
}

bool Within(const void* p, size_t len, const char* begin, size_t size) {
  const char* c = static_cast<const char*>(p);
  return c >= begin && len <= size && c - begin <= static_cast<ptrdiff_t>(size - len);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry_fuzz::Input in(data, size);
  const ReceiveLimits limits = Limits((in.Byte() & 1) != 0);
  const std::string_view stream = in.Rest();
  const char* p = stream.data();
  size_t left = stream.size();
  size_t need = 0, consumed = 0;
  Status error;

  wire::Hello hello;
  ParseResult r = ParseHello(p, left, &hello, &consumed, &need, &error);
  if (r == ParseResult::kNeedMore) FUZZ_CHECK(need > left);
  if (r != ParseResult::kDone) return 0;
  FUZZ_CHECK(consumed >= wire::kHelloSize && consumed <= left);
  p += consumed;
  left -= consumed;

  std::vector<ferry_arrival_segment_t> segments;
  while (left > 0) {
    ParsedMessage m;
    r = ParseMessage(p, left, limits, &segments, &m, &need, &error);
    if (r == ParseResult::kNeedMore) {
      FUZZ_CHECK(need > left && need <= limits.MaxMetaBytes());
      return 0;
    }
    if (r == ParseResult::kError) return 0;
    FUZZ_CHECK(m.meta_bytes <= left && m.meta_bytes <= limits.MaxMetaBytes());
    FUZZ_CHECK(m.num_segments <= limits.max_segments &&
               segments.size() >= m.num_segments);
    FUZZ_CHECK(Within(m.header, m.header_len, p, m.meta_bytes));
    for (uint32_t i = 0; i < m.num_segments; ++i) {
      if (segments[i].inline_data != nullptr) {
        FUZZ_CHECK(Within(segments[i].inline_data, segments[i].length, p, m.meta_bytes));
      }
    }
    // The same frame one byte short asks for more.
    std::vector<ferry_arrival_segment_t> again;
    ParsedMessage cut;
    FUZZ_CHECK(ParseMessage(p, m.meta_bytes - 1, limits, &again, &cut, &need, &error) ==
               ParseResult::kNeedMore);
    FUZZ_CHECK(need > m.meta_bytes - 1 && need <= m.meta_bytes);
    // The payload of the placed segments follows; the next frame after it.
    if (m.placed_bytes > left - m.meta_bytes) return 0;
    p += m.meta_bytes + m.placed_bytes;
    left -= m.meta_bytes + static_cast<size_t>(m.placed_bytes);
  }
  return 0;
}
