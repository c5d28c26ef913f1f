// ferry::Status: a status code from ferry/common.h plus a message that
// tells the user what happened and what to do. Errors are values: the core
// never throws across its own interfaces.
#pragma once

#include <ferry/common.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace ferry {

// "PEER_GONE", "INVALID_ARGUMENT", ...; "STATUS_<n>" for unknown codes.
const char* StatusCodeName(ferry_status_t code);

class Status {
 public:
  Status() noexcept = default;  // OK
  Status(ferry_status_t code, std::string message)
      : rep_(code == FERRY_OK && message.empty()
                 ? nullptr
                 : std::make_unique<Rep>(Rep{code, std::move(message)})) {}
  Status(const Status& other)
      : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}
  Status(Status&&) noexcept = default;
  Status& operator=(const Status& other) {
    if (this != &other) {
      rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
    }
    return *this;
  }
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr || rep_->code == FERRY_OK; }
  ferry_status_t code() const { return rep_ ? rep_->code : FERRY_OK; }
  const std::string& message() const { return rep_ ? rep_->message : Empty(); }
  // "PEER_GONE: connection reset by peer" (or "OK").
  std::string ToString() const;

 private:
  // LevelDB's layout: one pointer, null for OK, so that the success path
  // every call returns (progress(), send(), discard() on every message)
  // builds, moves and destroys a pointer, not a std::string.
  struct Rep {
    ferry_status_t code;
    std::string message;
  };
  static const std::string& Empty();

  std::unique_ptr<Rep> rep_;
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
