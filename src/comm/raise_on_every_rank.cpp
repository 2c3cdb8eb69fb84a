#include "fsdp/comm/raise_on_every_rank.hpp"

#include <climits>
#include <cstdint>

#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/control_words.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp {

namespace {

// What of an exception travels between ranks: its kind (usage for anything but an fsdp::Error)
// and its message without "fsdp: ".
struct CarriedFailure {
  std::int64_t kind = static_cast<std::int64_t>(ErrorKind::usage);
  std::string message;
};

CarriedFailure carried(const std::exception_ptr& failure) {
  CarriedFailure carried;
  try {
    std::rethrow_exception(failure);
  } catch (const Error& error) {
    carried.message = error.message();
    carried.kind = static_cast<std::int64_t>(error.kind());
  } catch (const std::exception& error) {
    carried.message = error.what();
  } catch (...) {
    carried.message = "an exception that is not a std::exception";
  }
  if (carried.message.empty()) {
    carried.message = "unknown error";
  }
  return carried;
}

}  // namespace

void raise_on_every_rank(ProcessGroup& group, const std::string& task,
                         const std::exception_ptr& failure) {
  std::int64_t lowest = failure ? group.rank() : INT_MAX;
  all_reduce_words(group, &lowest, 1, ReduceOp::min);
  if (lowest == INT_MAX) {
    return;
  }
  const int failed = static_cast<int>(lowest);
  CarriedFailure what = failed == group.rank() ? carried(failure) : CarriedFailure{};
  broadcast_words(group, &what.kind, 1, failed);
  broadcast_string(group, what.message, failed);
  throw Error(static_cast<ErrorKind>(what.kind),
              (group.size() > 1 ? "rank " + std::to_string(failed) + " " : std::string()) +
                  "could not " + task + ": " + what.message);
}

}  // namespace fsdp
