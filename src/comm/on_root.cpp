#include "fsdp/comm/on_root.hpp"

#include <cstdint>
#include <exception>

#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/control_words.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp {

std::string on_root(ProcessGroup& group, const std::string& task,
                    const std::function<std::string()>& decide, int root) {
  require(root >= 0 && root < group.size(), "on_root(" + task + "): root " + std::to_string(root) +
                                                " is not a rank of the group (0.." +
                                                std::to_string(group.size() - 1) + ")");
  // Every rank enters both broadcasts whatever happened on the root: the outcome travels as a
  // flag (0, or 1 + the ErrorKind of what the root threw) and the text is either the result or
  // the root's error message.
  std::int64_t failed = 0;
  std::string text;
  if (group.rank() == root) {
    try {
      text = decide();
    } catch (const std::exception& error) {
      const auto* ours = dynamic_cast<const Error*>(&error);
      failed = 1 + static_cast<std::int64_t>(ours != nullptr ? ours->kind() : ErrorKind::usage);
      text = message_of(error);
      if (text.empty()) {
        text = "unknown error";
      }
    } catch (...) {
      failed = 1;
      text = "an exception that is not a std::exception";
    }
  }
  broadcast_words(group, &failed, 1, root);
  broadcast_string(group, text, root);
  if (failed != 0) {
    throw Error(static_cast<ErrorKind>(failed - 1),
                "rank " + std::to_string(root) + " could not " + task + ": " + text);
  }
  return text;
}

}  // namespace fsdp
