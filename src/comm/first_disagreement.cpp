#include "fsdp/comm/first_disagreement.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/control_words.hpp"

namespace fsdp {

std::optional<Disagreement> first_disagreement(ProcessGroup& group,
                                               const std::optional<Disagreement>& mine) {
  // One all-reduce finds the lowest (index, rank) as index * size + rank; that rank then sends
  // its message. Indices past what the key can hold count as the last one: no rank compares
  // lists that long.
  const std::int64_t size = group.size();
  const std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const std::int64_t last_index = none / size - 1;
  std::int64_t key = none;
  if (mine) {
    const std::size_t index = std::min(mine->index, static_cast<std::size_t>(last_index));
    key = static_cast<std::int64_t>(index) * size + group.rank();
  }
  all_reduce_words(group, &key, 1, ReduceOp::min);
  if (key == none) {
    return std::nullopt;
  }
  const int culprit = static_cast<int>(key % size);
  Disagreement first{static_cast<std::size_t>(key / size),
                     group.rank() == culprit ? mine->message : std::string()};
  broadcast_string(group, first.message, culprit);
  return first;
}

}  // namespace fsdp
