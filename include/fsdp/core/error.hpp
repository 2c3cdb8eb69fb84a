// fsdp::Error: the one exception type the C++ API throws, and ErrorKind: what a caller does about
// it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace fsdp {

// What went wrong, as far as a caller's reaction goes. The message says the rest.
enum class ErrorKind : std::uint8_t {
  // The call broke a documented rule: an argument out of range, a plan the strategy cannot make,
  // an optimizer step before any gradient. Correct the call. Error(message) has this kind:
  // almost every check in the library is of this sort.
  usage,
  // A unit, parameter or other name the object does not have; the message lists those it has.
  unknown_name,
  // A call out of the order the object requires: a scope opened out of the registered order or
  // while another is open, closed without being open, a step finished half way. Nothing changed:
  // the expected call still works.
  order,
  // The object cannot take the call in its present state: a gradient outside a backward scope,
  // a runtime whose step an earlier failure lost (create a new one).
  state,
  // The ranks disagree: the arguments of a collective, the plan. The group stays usable.
  mismatch,
  // A collective did not complete in time (FSDP_COLLECTIVE_TIMEOUT_S). The group is unusable:
  // end the job.
  timeout,
  // MPI or NCCL reported a failure.
  communication,
  // A file could not be read or written, or does not hold what was expected.
  io,
};

// "usage", "unknown_name", ...
const char* name_of(ErrorKind kind);

// Thrown for every failure the library detects: bad arguments, ranks that disagree, MPI, NCCL and
// HDF5 failures, timeouts. what() says what went wrong, where, and what would be right; kind()
// says which of those it is.
//
// The "fsdp: " that starts every what() is added here, once: messages are written without it, and
// message() gives the text without it, for an error reported inside another one.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : Error(ErrorKind::usage, message) {}
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error("fsdp: " + message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }
  // what() without its "fsdp: ".
  const char* message() const noexcept { return what() + kPrefixLength; }

 private:
  static constexpr std::size_t kPrefixLength = 6;  // "fsdp: "
  ErrorKind kind_;
};

// An exception's text for use inside another message: an Error's without its "fsdp: ", any
// other's what().
inline std::string message_of(const std::exception& error) {
  const auto* ours = dynamic_cast<const Error*>(&error);
  return ours != nullptr ? ours->message() : error.what();
}

// Throws Error(kind, message) unless condition holds. Used for argument checks. The message is
// built before the call whether or not the condition holds: on a path that runs per collective,
// per scope or per step, pass the message as a lambda instead (below).
inline void require(bool condition, const std::string& message, ErrorKind kind = ErrorKind::usage) {
  if (!condition) {
    throw Error(kind, message);
  }
}

// The same with a function that makes the message, called only when the condition fails:
// require(ok, [&] { return "recv has " + std::to_string(n) + " elements"; });
template <class MakeMessage,
          class = std::enable_if_t<std::is_invocable_r_v<std::string, MakeMessage&>>>
inline void require(bool condition, MakeMessage&& make_message, ErrorKind kind = ErrorKind::usage) {
  if (!condition) {
    throw Error(kind, make_message());
  }
}

inline const char* name_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage:
      return "usage";
    case ErrorKind::unknown_name:
      return "unknown_name";
    case ErrorKind::order:
      return "order";
    case ErrorKind::state:
      return "state";
    case ErrorKind::mismatch:
      return "mismatch";
    case ErrorKind::timeout:
      return "timeout";
    case ErrorKind::communication:
      return "communication";
    case ErrorKind::io:
      return "io";
  }
  return "unknown";
}

}  // namespace fsdp
