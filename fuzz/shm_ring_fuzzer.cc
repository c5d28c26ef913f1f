// The shm plugin's ring reader (plugins/shm/src/ring.h) and its message
// record parser (message_record.h): a ring image the peer wrote (the input,
// in a 4 KiB ring; seeds are rings a real RingWriter filled), read the way
// Conn::StepRx reads it: Peek (pads skipped, each record's seq, length and
// kind checked), message records parsed, Consume. Checked besides
// ASan/UBSan: every record, header and inline segment the reader hands out
// lies inside the ring, and the tail only moves forward in whole records.
#include "fuzz_input.h"

#include "config.h"
#include "message_record.h"
#include "ring.h"

namespace {

using namespace ferry_shm;

constexpr uint64_t kRingSize = 4096;

bool Within(const uint8_t* p, uint64_t len, const uint8_t* begin, uint64_t size) {
  return p >= begin && len <= size && static_cast<uint64_t>(p - begin) <= size - len;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  alignas(kRecordAlign) static uint8_t ring[kRingSize];
  std::memset(ring, 0, sizeof ring);
  std::memcpy(ring, data, size < kRingSize ? size : kRingSize);
  ConsumerLine consumer{};
  RingReader reader;
  reader.Init(ring, kRingSize, &consumer);
  const Config limits;
  std::vector<ferry_arrival_segment_t> arrival;
  std::vector<InSegment> segs;
  // Two laps at most: a ring image cannot hold more records than that.
  for (int i = 0; i < 2 * static_cast<int>(kRingSize / kRecordAlign); ++i) {
    RecordView v;
    Status st;
    bool freed = false;
    const uint64_t before = reader.tail();
    if (!reader.Peek(&v, &st, &freed)) break;
    FUZZ_CHECK(reader.tail() >= before && reader.tail() % kRecordAlign == 0);
    FUZZ_CHECK(v.kind == kRecordMsg || v.kind == kRecordChunk);
    FUZZ_CHECK(Within(v.body, v.len, ring, kRingSize));
    FUZZ_CHECK(v.span == RecordSpan(v.len) && v.span <= kRingSize);
    if (v.kind == kRecordMsg) {
      MessageRecord m;
      if (ParseMessageRecord(v, reader.tail(), limits.max_segments,
                             limits.max_header_size, &arrival, &segs, &m, &st)) {
        FUZZ_CHECK(Within(m.header, m.header_len, v.body, v.len));
        FUZZ_CHECK(arrival.size() == segs.size() &&
                   arrival.size() <= limits.max_segments);
        for (size_t s = 0; s < arrival.size(); ++s) {
          if (segs[s].mode == kSegInline) {
            FUZZ_CHECK(Within(static_cast<const uint8_t*>(arrival[s].inline_data),
                              arrival[s].length, v.body, v.len));
          }
        }
      } else {
        FUZZ_CHECK(st.code == FERRY_DATA_LOSS);
      }
    }
    reader.Consume(v);
    FUZZ_CHECK(consumer.tail == reader.tail());
  }
  return 0;
}
