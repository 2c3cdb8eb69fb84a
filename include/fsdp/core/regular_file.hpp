// Paths that must name regular files: every input fsdp reads, and every file it replaces. One
// home for these checks, so that every reader and writer refuses a FIFO, a device or a directory
// alike, and no tool writes over the file it reads.
#pragma once

#include <sys/types.h>

#include <string>

namespace fsdp {

// The kind of file a stat() mode describes, for messages: "a regular file", "a directory", "a
// FIFO", "a character device", "a block device", "a socket", "a symbolic link".
const char* file_kind(mode_t mode);

// Throws fsdp::Error (kind io) "<what> '<path>' is a FIFO, not a regular file; ..." unless mode
// (the file's st_mode, links followed) is a regular file's.
void require_regular_mode(mode_t mode, const std::string& path, const std::string& what);

// Checks an input before it is opened: throws fsdp::Error (kind io) "cannot open <what> '<path>':
// No such file or directory" (or the reason stat gives), or require_regular_mode's error. It
// looks at the file without opening it: opening a FIFO blocks until a writer comes, a device may
// never end. what: "data file", "checkpoint", ...
void require_regular_file(const std::string& path, const std::string& what);

// True when a and b name one existing file: the same device and inode, symbolic links followed
// (two names, a hard link, "./x" and "x" alike). False when either does not exist.
bool same_file(const std::string& a, const std::string& b);

// Throws fsdp::Error (kind usage) when output names the file input names (same_file), which
// writing output would replace before, or while, it is read: "--write-graph 'g.json' is the same
// file as --graph './g.json', which writing it would replace: give the output another path".
// output_what, input_what: how the call or the command line names the two.
void require_not_input(const std::string& output, const std::string& output_what,
                       const std::string& input, const std::string& input_what);

}  // namespace fsdp
