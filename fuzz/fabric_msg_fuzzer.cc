// The fabric plugin's message parser (plugins/fabric/src/msg_parse.h): one
// MSG frame as it lands in a receive buffer, parsed by ParseMsg (the
// receive path, receive.cc) with and without RMA, and by ParseInlineMsg
// (the latency path for all-inline frames) when its sender operation is 0,
// under the default max_segments. Checked besides ASan/UBSan: a parsed
// frame's header and inline segments lie inside the frame, the two parsers
// agree on all-inline frames, and a refusal is FERRY_DATA_LOSS.
#include "fuzz_input.h"

#include "config.h"
#include "msg_parse.h"

namespace {

using namespace ferry_fabric;

bool Within(const void* p, size_t len, const char* begin, size_t size) {
  const char* c = static_cast<const char*>(p);
  return c >= begin && len <= size && static_cast<size_t>(c - begin) <= size - len;
}

void CheckParsed(const RxMsg& m, const char* frame, size_t len, uint32_t max_segments) {
  FUZZ_CHECK(m.segs.size() <= max_segments && m.bulk.size() == m.segs.size());
  FUZZ_CHECK(Within(m.header, m.header_len, frame, len));
  for (size_t i = 0; i < m.segs.size(); ++i) {
    if (m.bulk[i].mode == wire::kInline) {
      FUZZ_CHECK(Within(m.segs[i].inline_data, m.segs[i].length, frame, len));
    } else {
      FUZZ_CHECK(m.segs[i].inline_data == nullptr);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry_fuzz::Input in(data, size);
  const bool rma = (in.Byte() & 1) != 0;
  // A copy of exactly the frame's size, so ASan sees a read past its end.
  const std::string_view rest = in.Rest();
  std::vector<char> frame(rest.begin(), rest.end());
  const char* f = frame.data();
  const size_t len = frame.size();
  const uint32_t max_segments = Config{}.max_segments;

  RxMsg m;
  const Status st = ParseMsg(f, len, max_segments, rma, &m);
  if (st.ok()) {
    CheckParsed(m, f, len, max_segments);
    FUZZ_CHECK(rma || !m.has_rma);
  } else {
    FUZZ_CHECK(st.code == FERRY_DATA_LOSS);
  }

  wire::Msg h;
  if (wire::Read(f, len, &h) && h.op_id == 0) {
    RxMsg fast;
    const char* why = ParseInlineMsg(f, len, h, max_segments, &fast);
    FUZZ_CHECK((why == nullptr) == st.ok());
    if (why == nullptr) {
      CheckParsed(fast, f, len, max_segments);
      FUZZ_CHECK(fast.header == m.header && fast.header_len == m.header_len);
    }
  }
  return 0;
}
