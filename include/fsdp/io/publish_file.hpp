// publish_file: the first and last steps of every atomic write (checkpoints, the "latest" pointer,
// plans, graphs, data files, exports): every output fsdp writes goes through here.
#pragma once

#include <string>

namespace fsdp {

// Serial. Creates an empty file with a name no other file has beside the file that writing target
// replaces, for the atomic write of target: "<file>.<6 random characters>.tmp", where file is
// target or, if target is a symbolic link, the file its links end at (so that the rename stays on
// that file's file system and replaces the file, not the link). A fixed name would overwrite, and
// then consume, a user's own "<target>.tmp" or another writer's temporary. Its mode is what
// open(..., 0666) gives a new file (the umask's), or the permissions of the regular file it will
// replace. Throws fsdp::Error (kind io) when that file exists and is not a regular file (a device,
// a FIFO, a directory: a rename would replace it with a file), or the directory cannot be written.
std::string temporary_beside(const std::string& target);

// Serial. Checks that `bytes` can be written into `file` (an empty temporary) now, by allocating
// them (posix_fallocate, which also meets quotas) and giving them back, so that a write that would
// run out of space fails before it starts. Parallel HDF5 needs it: a collective write that fails
// part way on a full disk leaves the ranks in different collectives of HDF5's close, waiting
// forever. File systems without fallocate are asked for their free space (statvfs) instead.
// Throws fsdp::Error (kind io) naming the file, the bytes needed and the bytes free.
void require_space(const std::string& file, long long bytes);

// Serial. Makes a finished temporary file durable and puts it in place: fsync(from), rename(from,
// the file to names, its symbolic links followed as temporary_beside follows them), fsync(its
// directory). A crash at any moment leaves either the old file or the complete new one. Throws
// fsdp::Error (kind io) naming the step that failed, or temporary_beside's error for a file that
// is not a regular one.
void publish_file(const std::string& from, const std::string& to);

}  // namespace fsdp
