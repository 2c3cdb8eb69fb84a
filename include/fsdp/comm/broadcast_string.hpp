// broadcast_string: a string from one rank to every rank of a ProcessGroup.
#pragma once

#include <string>

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

// Collective over group: root's text replaces text on every other rank (empty strings too).
// Two broadcasts, the length then the bytes: ranks other than root cannot know the length.
void broadcast_string(ProcessGroup& group, std::string& text, int root);

}  // namespace fsdp
