// Status and Result<T>: the return type of every fallible call in deltacast.
//
// Errors carry a code (what kind of failure, so callers can react: retry,
// drop a connection, fall back to a full sync) and a message that names what
// was wrong, for the person reading the log.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace deltacast {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // the caller passed something unusable
  kCorrupt,          // bytes (from disk or network) fail validation
  kOutOfRange,       // an index or length outside what exists
  kNotFound,
  kFailedPrecondition,  // state does not allow it (wrong base version, closed engine)
  kMismatch,            // the two sides disagree (manifest, dtype, shape)
  kPermissionDenied,    // wrong token
  kUnavailable,         // peer or rail down; may succeed later
  kDeadlineExceeded,
  kResourceExhausted,
  kCancelled,
  kIoError,  // an operating-system call failed
  kInternal,
  kUnimplemented,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Prefixes the message with where the error happened ("bucket 3: ...").
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// One factory per code, each taking a fmt format string. nvcc's front end
// cannot evaluate fmt's compile-time (consteval) format checks, so CUDA
// sources get factories that format at run time instead.
#if defined(__CUDACC__)
#define DELTACAST_STATUS_FACTORY(fn, code)                                                    \
  template <typename... Args>                                                                 \
  Status fn(fmt::string_view format, const Args&... args) {                                   \
    return Status(StatusCode::code, fmt::vformat(format, fmt::make_format_args(args...)));    \
  }
#else
#define DELTACAST_STATUS_FACTORY(fn, code)                                          \
  template <typename... Args>                                                       \
  Status fn(fmt::format_string<Args...> format, Args&&... args) {                   \
    return Status(StatusCode::code, fmt::format(format, std::forward<Args>(args)...)); \
  }
#endif
DELTACAST_STATUS_FACTORY(invalid_argument, kInvalidArgument)
DELTACAST_STATUS_FACTORY(corrupt, kCorrupt)
DELTACAST_STATUS_FACTORY(out_of_range, kOutOfRange)
DELTACAST_STATUS_FACTORY(not_found, kNotFound)
DELTACAST_STATUS_FACTORY(failed_precondition, kFailedPrecondition)
DELTACAST_STATUS_FACTORY(mismatch, kMismatch)
DELTACAST_STATUS_FACTORY(permission_denied, kPermissionDenied)
DELTACAST_STATUS_FACTORY(unavailable, kUnavailable)
DELTACAST_STATUS_FACTORY(deadline_exceeded, kDeadlineExceeded)
DELTACAST_STATUS_FACTORY(resource_exhausted, kResourceExhausted)
DELTACAST_STATUS_FACTORY(cancelled, kCancelled)
DELTACAST_STATUS_FACTORY(io_error, kIoError)
DELTACAST_STATUS_FACTORY(internal_error, kInternal)
DELTACAST_STATUS_FACTORY(unimplemented, kUnimplemented)
#undef DELTACAST_STATUS_FACTORY

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(state_).ok()) {
      state_ = Status(StatusCode::kInternal, "Result constructed from an ok Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  Status status() const { return ok() ? Status() : std::get<Status>(state_); }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace deltacast

#define DELTACAST_CONCAT_INNER(a, b) a##b
#define DELTACAST_CONCAT(a, b) DELTACAST_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define DC_RETURN_IF_ERROR(expr) DC_RETURN_IF_ERROR_IMPL(DELTACAST_CONCAT(dc_status_, __COUNTER__), expr)
#define DC_RETURN_IF_ERROR_IMPL(tmp, expr) \
  do {                                     \
    ::deltacast::Status tmp = (expr);      \
    if (!tmp.ok()) return tmp;             \
  } while (0)

// `DC_ASSIGN_OR_RETURN(auto x, make_x());` unwraps a Result or returns its error.
#define DC_ASSIGN_OR_RETURN(lhs, expr) DC_ASSIGN_OR_RETURN_IMPL(DELTACAST_CONCAT(dc_result_, __COUNTER__), lhs, expr)
#define DC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
