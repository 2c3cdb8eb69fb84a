#include "fsdp/comm/broadcast_string.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

#include "fsdp/comm/control_words.hpp"

namespace fsdp {

// The bytes travel as whole int64 words (ProcessGroup has no byte dtype) where the backend can
// reach them (control_words.hpp); the padding of the last word is dropped again on arrival.
void broadcast_string(ProcessGroup& group, std::string& text, int root) {
  const bool sending = group.rank() == root;
  std::int64_t length = sending ? static_cast<std::int64_t>(text.size()) : 0;
  broadcast_words(group, &length, 1, root);
  const std::size_t bytes = static_cast<std::size_t>(length);
  std::vector<std::int64_t> words((bytes + 7) / 8, 0);
  if (sending && bytes > 0) {
    std::memcpy(words.data(), text.data(), bytes);
  }
  broadcast_words(group, words.data(), words.size(), root);
  if (!sending) {
    text.assign(reinterpret_cast<const char*>(words.data()), bytes);
  }
}

}  // namespace fsdp
