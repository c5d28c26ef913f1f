#include "common/status.h"

#include <string>

namespace ferry {

const char* StatusCodeName(ferry_status_t code) {
  switch (code) {
    case FERRY_OK:
      return "OK";
    case FERRY_CANCELLED:
      return "CANCELLED";
    case FERRY_UNKNOWN:
      return "UNKNOWN";
    case FERRY_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case FERRY_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case FERRY_NOT_FOUND:
      return "NOT_FOUND";
    case FERRY_ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case FERRY_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case FERRY_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case FERRY_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case FERRY_ABORTED:
      return "ABORTED";
    case FERRY_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case FERRY_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case FERRY_INTERNAL:
      return "INTERNAL";
    case FERRY_UNAVAILABLE:
      return "UNAVAILABLE";
    case FERRY_DATA_LOSS:
      return "DATA_LOSS";
    case FERRY_UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case FERRY_PEER_GONE:
      return "PEER_GONE";
    case FERRY_INCOMPATIBLE:
      return "INCOMPATIBLE";
    default:
      return "UNKNOWN_STATUS";
  }
}

const std::string& Status::Empty() {
  // Never destroyed: message() may be called from other static objects'
  // destructors, after this one's would have run.
  static const std::string* const empty = new std::string();
  return *empty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out = StatusCodeName(code());
  if (out == "UNKNOWN_STATUS") out = "STATUS_" + std::to_string(code());
  if (!message().empty()) out += ": " + message();
  return out;
}

}  // namespace ferry
