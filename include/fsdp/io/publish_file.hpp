// publish_file: the last step of every atomic write (checkpoints, the "latest" pointer).
#pragma once

#include <string>

namespace fsdp {

// Serial. Creates an empty file with a name no other file has, beside target (its directory,
// "<target>.<6 random characters>.tmp", mode 0600), for the atomic write of target: a fixed name
// would overwrite, and then consume, a user's own "<target>.tmp" or another writer's temporary.
// Throws fsdp::Error (kind io) saying the directory cannot be written.
std::string temporary_beside(const std::string& target);

// Serial. Checks that `bytes` can be written into `file` (an empty temporary) now, by allocating
// them (posix_fallocate, which also meets quotas) and giving them back, so that a write that would
// run out of space fails before it starts. Parallel HDF5 needs it: a collective write that fails
// part way on a full disk leaves the ranks in different collectives of HDF5's close, waiting
// forever. File systems without fallocate are asked for their free space (statvfs) instead.
// Throws fsdp::Error (kind io) naming the file, the bytes needed and the bytes free.
void require_space(const std::string& file, long long bytes);

// Serial. Makes a finished temporary file durable and puts it in place: fsync(from), rename(from,
// to), fsync(the directory of to). A crash at any moment leaves either the old `to` or the
// complete new one. Throws fsdp::Error (kind io) naming the step that failed.
void publish_file(const std::string& from, const std::string& to);

}  // namespace fsdp
