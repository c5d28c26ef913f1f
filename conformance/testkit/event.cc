#include "testkit/event.h"

#include "common/status.h"

#include <cstddef>
#include <cstring>
#include <sstream>

namespace ferry::testkit {
namespace {

template <typename T>
T Field(const ferry_event_t& e, size_t offset) {
  if (e.struct_size < offset + sizeof(T)) return T{};
  T value;
  std::memcpy(&value, reinterpret_cast<const char*>(&e) + offset, sizeof value);
  return value;
}
#define EVENT_FIELD(e, name) \
  Field<decltype(ferry_event_t::name)>(e, offsetof(ferry_event_t, name))

}  // namespace

std::string StatusText(ferry_status_t status) {
  return std::string(StatusCodeName(status)) + " (" + std::to_string(status) + ")";
}

bool EventView::AllInline() const {
  for (const SegmentView& s : segments) {
    if (s.inline_data == nullptr && s.length > 0) return false;
  }
  return true;
}

EventView ReadEvent(const ferry_event_t& raw) {
  EventView out;
  out.type = raw.type;
  out.status = raw.status;
  out.conn = EVENT_FIELD(raw, conn);
  out.user_data = EVENT_FIELD(raw, user_data);
  out.conn_user_data = EVENT_FIELD(raw, conn_user_data);
  if (const char* message = EVENT_FIELD(raw, message)) out.message = message;
  if (out.type != FERRY_EV_ARRIVAL || raw.struct_size < FERRY_EVENT_STRUCT_SIZE)
    return out;
  out.msg_id = raw.msg_id;
  out.header = raw.header;
  out.header_len = raw.header_len;
  for (uint32_t i = 0; i < raw.num_segments; ++i) {
    const ferry_arrival_segment_t* s = FERRY_ELEMENT_AT(
        const ferry_arrival_segment_t, raw.segments, raw.segment_stride, i);
    SegmentView v;
    v.length = s->length;
    if (FERRY_FIELD_PRESENT(s, ferry_arrival_segment_t, device)) v.device = s->device;
    if (FERRY_FIELD_PRESENT(s, ferry_arrival_segment_t, inline_data)) {
      v.inline_data = s->inline_data;
    }
    out.segments.push_back(v);
  }
  return out;
}

Event CopyEvent(const ferry_event_t& raw) {
  EventView v = ReadEvent(raw);
  Event e;
  e.type = v.type;
  e.status = v.status;
  e.conn = v.conn;
  e.user_data = v.user_data;
  e.conn_user_data = v.conn_user_data;
  e.message = std::move(v.message);
  e.msg_id = v.msg_id;
  if (v.header_len > 0) e.header.assign(static_cast<const char*>(v.header), v.header_len);
  for (const SegmentView& s : v.segments) {
    Event::Segment copy;
    copy.length = s.length;
    copy.device = s.device;
    copy.inline_data = s.inline_data;
    copy.is_inline = s.inline_data != nullptr;
    if (copy.is_inline)
      copy.bytes.assign(static_cast<const char*>(s.inline_data), s.length);
    e.segments.push_back(std::move(copy));
  }
  return e;
}

const char* EventTypeName(int32_t type) {
  switch (type) {
    case FERRY_EV_CONNECTED:
      return "CONNECTED";
    case FERRY_EV_ACCEPTED:
      return "ACCEPTED";
    case FERRY_EV_SEND_DONE:
      return "SEND_DONE";
    case FERRY_EV_ARRIVAL:
      return "ARRIVAL";
    case FERRY_EV_PLACE_DONE:
      return "PLACE_DONE";
    case FERRY_EV_CONN_BROKEN:
      return "CONN_BROKEN";
    case FERRY_EV_CLOSED:
      return "CLOSED";
  }
  return "UNKNOWN_EVENT";
}

std::string Describe(const EventView& e) {
  std::ostringstream s;
  s << EventTypeName(e.type) << " conn=" << e.conn;
  if (e.status != FERRY_OK) {
    s << " status=" << StatusText(e.status) << " message=\"" << e.message << "\"";
  }
  if (e.type == FERRY_EV_ARRIVAL) {
    s << " msg_id=" << e.msg_id << " header=" << e.header_len << "B segments=[";
    for (size_t i = 0; i < e.segments.size(); ++i) {
      s << (i ? "," : "") << e.segments[i].length
        << (e.segments[i].inline_data ? "i" : "");
    }
    s << "]";
  }
  return s.str();
}

std::string Describe(const Event& e) {
  std::ostringstream s;
  s << EventTypeName(e.type) << " conn=" << e.conn;
  if (e.status != FERRY_OK) {
    s << " status=" << StatusText(e.status) << " message=\"" << e.message << "\"";
  }
  if (e.type == FERRY_EV_ARRIVAL) {
    s << " msg_id=" << e.msg_id << " header=" << e.header.size() << "B segments=[";
    for (size_t i = 0; i < e.segments.size(); ++i) {
      s << (i ? "," : "") << e.segments[i].length << (e.segments[i].is_inline ? "i" : "");
    }
    s << "]";
  }
  return s.str();
}

}  // namespace ferry::testkit
