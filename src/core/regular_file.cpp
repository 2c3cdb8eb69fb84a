#include "fsdp/core/regular_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "fsdp/core/error.hpp"

namespace fsdp {

const char* file_kind(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "a file of unknown kind";
  }
}

void require_regular_mode(mode_t mode, const std::string& path, const std::string& what) {
  if (!S_ISREG(mode)) {
    throw Error(ErrorKind::io, what + " '" + path + "' is " + file_kind(mode) +
                                   ", not a regular file; give the path of a regular file");
  }
}

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) {
    throw Error(ErrorKind::io, "cannot open " + what + " '" + path + "': " + std::strerror(errno));
  }
  require_regular_mode(status.st_mode, path, what);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat first {
  }, second{};
  return ::stat(a.c_str(), &first) == 0 && ::stat(b.c_str(), &second) == 0 &&
         first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

void require_not_input(const std::string& output, const std::string& output_what,
                       const std::string& input, const std::string& input_what) {
  if (same_file(output, input)) {
    throw Error(ErrorKind::usage, output_what + " '" + output + "' is the same file as " +
                                      input_what + " '" + input +
                                      "', which writing it would replace: give the output "
                                      "another path");
  }
}

}  // namespace fsdp
