// ferry::Status: a status code from ferry/transport.h plus a message that
// tells the user what happened and what to do. Errors are values: the core
// never throws across its own interfaces.
#pragma once

#include <ferry/transport.h>

#include <optional>
#include <string>
#include <utility>

namespace ferry {

// "PEER_GONE", "INVALID_ARGUMENT", ...; "STATUS_<n>" for unknown codes.
const char* StatusCodeName(ferry_status_t code);

class Status {
 public:
  Status() = default;  // OK
  Status(ferry_status_t code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == FERRY_OK; }
  ferry_status_t code() const { return code_; }
  const std::string& message() const { return message_; }
  // "PEER_GONE: connection reset by peer" (or "OK").
  std::string ToString() const;

 private:
  ferry_status_t code_ = FERRY_OK;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;  // OK when value_ is set
  std::optional<T> value_;
};

}  // namespace ferry
