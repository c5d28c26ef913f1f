// Parsing one message record read from the peer's ring (layout:
// shm_layout.h): its segment table, CMA addresses, header and inline bytes,
// each checked against the record's bounds before anything is read through
// it. On its own (not a Conn method) so that it is a pure function over the
// record's bytes, which fuzz/shm_ring_fuzzer.cc exercises.
#pragma once

#include "ring.h"
#include "shm_layout.h"
#include "status.h"

#include <ferry/transport.h>

#include <cstdint>
#include <vector>

namespace ferry_shm {

// Where one arriving segment's bytes are and go.
struct InSegment {
  uint64_t length = 0;
  uint32_t mode = 0;        // kSeg*
  uint64_t address = 0;     // kSegCma: in the sender
  uint8_t* dest = nullptr;  // placed destination, nullptr = drop
  uint64_t done = 0;        // bytes placed or skipped
};

// What a valid message record says beyond its segments.
struct MessageRecord {
  const uint8_t* header = nullptr;  // points into the record
  uint32_t header_len = 0;
  uint64_t ring_bytes = 0;  // of kSegRing segments: they follow in chunk records
  bool has_cma = false;     // some segment is read with CMA
};

// Parses the message record `v` found at ring position `at` (for error
// messages) against this side's limits. On success *arrival and *segs hold
// one entry per segment (inline_data pointing into the record) and *out the
// rest. A record that lies is FERRY_DATA_LOSS in *st and false; the outputs
// then mean nothing.
bool ParseMessageRecord(const RecordView& v, uint64_t at, uint32_t max_segments,
                        uint32_t max_header_size,
                        std::vector<ferry_arrival_segment_t>* arrival,
                        std::vector<InSegment>* segs, MessageRecord* out, Status* st);

}  // namespace ferry_shm
