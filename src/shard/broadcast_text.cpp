#include "broadcast_text.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

namespace fsdp::detail {

// Text moves as whole int64 words: ProcessGroup has no byte dtype, and the padding is dropped
// again on arrival. Rank `root` passes its text; the others receive it. Collective.
std::string broadcast_text(const std::string& text, int root, ProcessGroup& group) {
  std::int64_t length = group.rank() == root ? static_cast<std::int64_t>(text.size()) : 0;
  group.broadcast(&length, 1, root);
  const std::size_t words = (static_cast<std::size_t>(length) + 7) / 8;
  std::vector<std::int64_t> buffer(words, 0);
  if (group.rank() == root && !text.empty()) {
    std::memcpy(buffer.data(), text.data(), text.size());
  }
  group.broadcast(buffer.data(), words, root);
  std::string received(static_cast<std::size_t>(length), '\0');
  if (length > 0) {
    std::memcpy(received.data(), buffer.data(), received.size());
  }
  return received;
}

}  // namespace fsdp::detail
