// Parses and bounds-checks what a peer sent: its hello and each message's
// prefix, segment table, header and inline segments. Nothing a peer sends can
// make the receiver allocate more than its own announced limits allow, and a
// malformed frame is an error with a message, never a crash.
#pragma once

#include "config.h"
#include "status.h"
#include "wire.h"

#include <ferry/transport.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry_tcp {

// The receive limits this side announced in its hello.
struct ReceiveLimits {
  uint32_t max_header = 0;
  uint32_t max_segments = 0;
  uint32_t inline_limit = 0;
  uint32_t inline_total = 0;
  uint64_t max_message = 0;

  // The most bytes ParseFrame may ask to have buffered for one message.
  size_t MaxMetaBytes() const {
    return wire::kPrefixSize + size_t{max_segments} * wire::kSegmentEntrySize +
           max_header + inline_total;
  }
};

// The limits a context with `config` announces and enforces.
inline ReceiveLimits LimitsOf(const Config& config) {
  ReceiveLimits l;
  l.max_header = config.max_header_size;
  l.max_segments = config.max_segments;
  l.inline_limit = config.max_inline_size;
  l.inline_total = config.max_inline_total;
  l.max_message = config.max_message_size;
  return l;
}

// The hello that announces `limits`.
inline wire::Hello HelloOf(const ReceiveLimits& limits) {
  wire::Hello h;
  h.max_header = limits.max_header;
  h.max_segments = limits.max_segments;
  h.inline_limit = limits.inline_limit;
  h.inline_total = limits.inline_total;
  h.max_message = limits.max_message;
  return h;
}

enum class ParseResult {
  kNeedMore,  // *need: how many bytes must be buffered to go on
  kDone,      // a complete unit was parsed
  kError,     // *error says what is wrong; the connection must be dropped
};

// A message whose prefix, table, header and inline segments are buffered.
struct ParsedMessage {
  size_t meta_bytes = 0;  // prefix + table + header + inline segments
  const char* header = nullptr;
  uint32_t header_len = 0;
  uint32_t num_segments = 0;
  uint64_t placed_bytes = 0;  // payload after the meta: non-inline segments
};

// Parses the hello at the start of `data`. On kDone, *consumed is its length.
ParseResult ParseHello(const char* data, size_t size, wire::Hello* hello,
                       size_t* consumed, size_t* need, Status* error);

// Parses one message at the start of `data`. On kDone, the first
// num_segments entries of `segments` describe the segments (the vector only
// grows, up to the max_segments limit); inline ones point into `data`. On
// kNeedMore or kError its contents mean nothing.
ParseResult ParseMessage(const char* data, size_t size, const ReceiveLimits& limits,
                         std::vector<ferry_arrival_segment_t>* segments,
                         ParsedMessage* message, size_t* need, Status* error);

}  // namespace ferry_tcp
