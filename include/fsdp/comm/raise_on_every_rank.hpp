// raise_on_every_rank: each rank did its part of a task; when any rank failed, every rank throws
// the failure, so no rank goes on alone into the next collective.
#pragma once

#include <exception>
#include <string>

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

// Collective over group. failure is this rank's exception (null when it succeeded). When any
// rank failed, every rank throws fsdp::Error with the kind of the lowest failing rank's
// fsdp::Error (usage for another exception) and the message
//   "rank <r> could not <task>: <its message>"   (or "could not <task>: ..." in a group of one).
void raise_on_every_rank(ProcessGroup& group, const std::string& task,
                         const std::exception_ptr& failure);

}  // namespace fsdp
