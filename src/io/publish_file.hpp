// publish_file: the last step of every atomic write (checkpoints, the "latest" pointer).
#pragma once

#include <string>

namespace fsdp {

// Serial. Makes a finished temporary file durable and puts it in place: fsync(from), rename(from,
// to), fsync(the directory of to). A crash at any moment leaves either the old `to` or the
// complete new one. Throws fsdp::Error (kind io) naming the step that failed.
void publish_file(const std::string& from, const std::string& to);

}  // namespace fsdp
