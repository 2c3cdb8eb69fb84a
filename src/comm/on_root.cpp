#include "fsdp/comm/on_root.hpp"

#include <exception>

#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/raise_on_every_rank.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp {

std::string on_root(ProcessGroup& group, const std::string& task,
                    const std::function<std::string()>& decide, int root) {
  require(root >= 0 && root < group.size(), "on_root(" + task + "): root " + std::to_string(root) +
                                                " is not a rank of the group (0.." +
                                                std::to_string(group.size() - 1) + ")");
  std::string text;
  std::exception_ptr failure;
  if (group.rank() == root) {
    try {
      text = decide();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  raise_on_every_rank(group, task, failure);
  broadcast_string(group, text, root);
  return text;
}

}  // namespace fsdp
