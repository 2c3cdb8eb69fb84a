// on_root: one rank decides, every rank learns the outcome, including a failure.
#pragma once

#include <functional>
#include <string>

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

// Collective over group. Runs decide() on rank `root` only and returns its text on every rank
// (a result the root serialized: a plan, a solution; or empty for an action such as writing a
// file). When decide() throws anything, every rank, root included, throws what
// raise_on_every_rank makes of it:
//   "fsdp: rank <root> could not <task>: <the exception's message>"   ("fsdp: could not ..." alone)
// with the kind of the root's fsdp::Error (usage for any other exception), so no rank is left
// waiting for a result that will not come.
std::string on_root(ProcessGroup& group, const std::string& task,
                    const std::function<std::string()>& decide, int root = 0);

}  // namespace fsdp
