// Reading the events a plugin's progress() returned. The plugin's event
// array, its message strings and its arrival descriptors live only until
// the next progress() (header and inline bytes until the arrival is
// answered), so a test keeps its own copy:
//   EventView  the fields as the plugin wrote them, read within the event's
//              struct_size (a field the plugin's struct lacks reads as zero,
//              the ABI's rule for readers); header and inline data still
//              point into the plugin;
//   Event      an owned copy: header and inline bytes copied too, so it
//              outlives the answer.
#pragma once

#include <ferry/transport.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::testkit {

struct SegmentView {
  uint64_t length = 0;
  ferry_device_t device{};
  const void* inline_data = nullptr;  // borrowed until place()/discard()
};

struct EventView {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  ferry_conn_t* conn = nullptr;
  void* user_data = nullptr;
  void* conn_user_data = nullptr;
  std::string message;
  // ARRIVAL only.
  uint64_t msg_id = 0;
  const void* header = nullptr;  // borrowed until place()/discard()
  uint64_t header_len = 0;
  std::vector<SegmentView> segments;

  bool AllInline() const;
};

// `raw`'s fields within its struct_size. For an ARRIVAL the caller has
// checked that the arrival fields are there and that `segments` and
// `segment_stride` describe num_segments descriptors.
EventView ReadEvent(const ferry_event_t& raw);

struct Event {
  int32_t type = 0;
  ferry_status_t status = FERRY_OK;
  ferry_conn_t* conn = nullptr;
  void* user_data = nullptr;
  void* conn_user_data = nullptr;
  std::string message;
  // ARRIVAL only.
  uint64_t msg_id = 0;
  std::string header;
  struct Segment {
    uint64_t length = 0;
    ferry_device_t device{};
    bool is_inline = false;
    std::string bytes;                  // the inline bytes
    const void* inline_data = nullptr;  // the plugin's, until the answer
  };
  std::vector<Segment> segments;
};

// An owned copy of `raw` (ReadEvent, then the bytes).
Event CopyEvent(const ferry_event_t& raw);

// "ARRIVAL", "CLOSED", ...; "UNKNOWN_EVENT" for a type the ABI lacks.
const char* EventTypeName(int32_t type);
// "PEER_GONE (100)".
std::string StatusText(ferry_status_t status);
// One line for failure messages: "SEND_DONE conn=0x... status=... message=..."
std::string Describe(const EventView& event);
std::string Describe(const Event& event);

}  // namespace ferry::testkit
