// first_disagreement: ranks compared what they were given with a reference (rank 0's plan, rank
// 0's settings) and some found a difference; every rank learns the same one, the first.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

// Where one rank found its input to differ from the reference: the position of the first
// difference in the order the caller compares (a parameter index, a setting index) and a message
// that names both sides.
struct Disagreement {
  std::size_t index = 0;
  std::string message;
};

// Collective over group. Returns, on every rank, the disagreement of the lowest (index, rank)
// among the ranks that found one (so every rank reports the same, earliest, difference), or
// nullopt when none did. Every rank enters the same collectives whatever it found.
std::optional<Disagreement> first_disagreement(ProcessGroup& group,
                                               const std::optional<Disagreement>& mine);

}  // namespace fsdp
