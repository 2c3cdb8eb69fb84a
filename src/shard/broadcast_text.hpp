// Internal: a string from one rank to all, over a ProcessGroup (which has no byte dtype).
#pragma once

#include <string>

#include "fsdp/comm/process_group.hpp"

namespace fsdp::detail {

// Collective over group: root passes its text, every rank returns it.
std::string broadcast_text(const std::string& text, int root, ProcessGroup& group);

}  // namespace fsdp::detail
