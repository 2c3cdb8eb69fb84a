// publish_file: the last step of every atomic write (checkpoints, the "latest" pointer).
#pragma once

#include <string>

namespace fsdp {

// Serial. Creates an empty file with a name no other file has, beside target (its directory,
// "<target>.<6 random characters>.tmp", mode 0600), for the atomic write of target: a fixed name
// would overwrite, and then consume, a user's own "<target>.tmp" or another writer's temporary.
// Throws fsdp::Error (kind io) saying the directory cannot be written.
std::string temporary_beside(const std::string& target);

// Serial. Makes a finished temporary file durable and puts it in place: fsync(from), rename(from,
// to), fsync(the directory of to). A crash at any moment leaves either the old `to` or the
// complete new one. Throws fsdp::Error (kind io) naming the step that failed.
void publish_file(const std::string& from, const std::string& to);

}  // namespace fsdp
