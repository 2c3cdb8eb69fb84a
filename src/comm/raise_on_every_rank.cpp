#include "fsdp/comm/raise_on_every_rank.hpp"

#include <climits>
#include <cstdint>

#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/control_words.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp {

void raise_on_every_rank(ProcessGroup& group, const std::string& task,
                         const std::exception_ptr& failure) {
  std::string message;
  std::int64_t kind = 0;
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const Error& error) {
      message = error.message();
      kind = static_cast<std::int64_t>(error.kind());
    } catch (const std::exception& error) {
      message = error.what();
    } catch (...) {
      message = "an exception that is not a std::exception";
    }
    if (message.empty()) {
      message = "unknown error";
    }
  }
  std::int64_t lowest = failure ? group.rank() : INT_MAX;
  all_reduce_words(group, &lowest, 1, ReduceOp::min);
  if (lowest == INT_MAX) {
    return;
  }
  const int failed = static_cast<int>(lowest);
  broadcast_words(group, &kind, 1, failed);
  broadcast_string(group, message, failed);
  throw Error(static_cast<ErrorKind>(kind),
              (group.size() > 1 ? "rank " + std::to_string(failed) + " " : std::string()) +
                  "could not " + task + ": " + message);
}

}  // namespace fsdp
