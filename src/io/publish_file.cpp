#include "fsdp/io/publish_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "fsdp/core/error.hpp"
#include "fsdp/core/regular_file.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {
namespace {

bool sync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    return false;
  }
  const bool synced = ::fsync(fd) == 0;
  return ::close(fd) == 0 && synced;
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash + 1);
}

// Symbolic links followed before a write gives up: the kernel's own limit (MAXSYMLINKS, ELOOP).
constexpr int kMostLinks = 40;

// path with its last component replaced by name: ("dir/x", "y") -> "dir/y"; ("x", "y") -> "y".
std::string beside(const std::string& path, const std::string& name) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? name : path.substr(0, slash + 1) + name;
}

// The file a write of path replaces: path itself or, where path is a symbolic link, the file its
// chain of links ends at, which may not exist yet (as open(O_CREAT) creates a dangling link's
// target). Renaming over the link itself would replace the link with a file.
std::string final_target(const std::string& path) {
  std::string current = path;
  for (int links = 0;; ++links) {
    struct stat status {};
    if (::lstat(current.c_str(), &status) != 0 || !S_ISLNK(status.st_mode)) {
      return current;  // a file, or none yet: creating the temporary says what is wrong
    }
    if (links == kMostLinks) {
      throw Error(ErrorKind::io, "cannot write '" + path + "': it is a chain of more than " +
                                     std::to_string(kMostLinks) +
                                     " symbolic links (a loop?); give the path of a regular file");
    }
    std::string target(static_cast<std::size_t>(std::max<off_t>(status.st_size, PATH_MAX)) + 1,
                       '\0');
    const ssize_t length = ::readlink(current.c_str(), target.data(), target.size());
    if (length < 0 || static_cast<std::size_t>(length) >= target.size()) {
      throw Error(ErrorKind::io, "cannot read the symbolic link '" + current + "' (" +
                                     (length < 0 ? std::strerror(errno) : "it grew") + ")");
    }
    target.resize(static_cast<std::size_t>(length));
    current = target[0] == '/' ? target : beside(current, target);
  }
}

// The file that writing path replaces (final_target), and the permission bits it has, if it
// exists. Throws fsdp::Error (kind io) when it exists and is not a regular file: the rename that
// publishes an output would put a file in the place of a device, a FIFO or a directory.
struct Target {
  std::string path;
  bool exists = false;
  mode_t permissions = 0;
};

Target target_of(const std::string& path) {
  Target target;
  target.path = final_target(path);
  struct stat status {};
  if (::stat(target.path.c_str(), &status) != 0) {
    return target;
  }
  if (!S_ISREG(status.st_mode)) {
    const std::string link = target.path == path ? "" : " (a link to '" + target.path + "')";
    throw Error(ErrorKind::io,
                "cannot write '" + path + "'" + link + ": it is " + file_kind(status.st_mode) +
                    ", not a regular file; fsdp replaces an output whole (a new file renamed "
                    "over the old one), so it writes only regular files: give the path of a "
                    "regular file or of a new one");
  }
  target.exists = true;
  target.permissions = status.st_mode & 0777;
  return target;
}

// "<file>.<6 random letters or digits>.tmp", created by this call alone (O_EXCL) with the mode
// open(..., 0666) gives: the umask's. A fixed name would overwrite, and then consume, a user's own
// "<file>.tmp" or another writer's temporary. mkstemps would make it 0600 whatever the umask.
std::string create_temporary(const std::string& file, int& fd) {
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device device;
  std::uniform_int_distribution<std::size_t> letter(0, sizeof kLetters - 2);
  constexpr int kAttempts = 100;
  int error = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::string name = file + ".";
    for (int i = 0; i < 6; ++i) {
      name += kLetters[letter(device)];
    }
    name += ".tmp";
    fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      return name;
    }
    error = errno;
    if (error != EEXIST) {
      break;
    }
  }
  throw Error(ErrorKind::io, "cannot create a temporary file beside '" + file + "' (" +
                                 std::strerror(error) +
                                 "): does its directory exist, and may this job write there?");
}

}  // namespace

std::string temporary_beside(const std::string& target) {
  const Target replaced = target_of(target);
  int fd = -1;
  const std::string name = create_temporary(replaced.path, fd);
  // A file replaced keeps its permissions, as open(O_TRUNC) would keep them.
  std::string failed;
  if (replaced.exists && ::fchmod(fd, replaced.permissions) != 0) {
    failed = "give '" + name + "' the permissions of '" + replaced.path + "' (" +
             std::strerror(errno) + ")";
  }
  if (::close(fd) != 0 && failed.empty()) {
    failed = "close the new temporary file '" + name + "' (" + std::strerror(errno) + ")";
  }
  if (!failed.empty()) {
    std::remove(name.c_str());
    throw Error(ErrorKind::io, "cannot " + failed);
  }
  return name;
}

void require_space(const std::string& file, long long bytes) {
  const int fd = ::open(file.c_str(), O_WRONLY);
  if (fd < 0) {
    throw Error(ErrorKind::io, "cannot open '" + file + "' (" + std::strerror(errno) + ")");
  }
  const int allocated = bytes > 0 ? ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) : 0;
  // Gives the space back: the writer that follows (HDF5) truncates the file anyway.
  const bool released = ::ftruncate(fd, 0) == 0;
  const bool closed = ::close(fd) == 0;
  if (allocated == EOPNOTSUPP || allocated == EINVAL) {
    // No fallocate here (some network and parallel file systems): the free space must do.
    struct statvfs space {};
    if (::statvfs(directory_of(file).c_str(), &space) == 0) {
      const long double free = static_cast<long double>(space.f_bavail) * space.f_frsize;
      if (free < static_cast<long double>(bytes)) {
        throw Error(ErrorKind::io, "not enough space for '" + file + "': it needs " +
                                       bytes_text(static_cast<double>(bytes)) +
                                       ", its file system has " +
                                       bytes_text(static_cast<double>(free)) +
                                       " free; free some space or write elsewhere");
      }
    }
  } else if (allocated != 0) {
    struct statvfs space {};
    const std::string free =
        ::statvfs(directory_of(file).c_str(), &space) == 0
            ? bytes_text(static_cast<double>(space.f_bavail) * static_cast<double>(space.f_frsize))
            : std::string("an unknown amount");
    throw Error(ErrorKind::io, "not enough space for '" + file + "': it needs " +
                                   bytes_text(static_cast<double>(bytes)) + " (" +
                                   std::strerror(allocated) + "), its file system has " + free +
                                   " free; free some space or write elsewhere");
  }
  if (!released || !closed) {
    throw Error(ErrorKind::io, "cannot truncate '" + file + "' after checking its space (" +
                                   std::strerror(errno) + ")");
  }
}

void publish_file(const std::string& from, const std::string& to) {
  // A link is followed: its target is replaced, beside which temporary_beside made from.
  const std::string target = target_of(to).path;
  if (!sync_path(from, O_RDONLY)) {
    throw Error(ErrorKind::io, "cannot sync '" + from + "' to disk before renaming it");
  }
  if (std::rename(from.c_str(), target.c_str()) != 0) {
    throw Error(ErrorKind::io,
                "cannot rename '" + from + "' to '" + target + "' (" + std::strerror(errno) + ")");
  }
  // The rename is durable only once the directory entry is.
  const std::string directory = directory_of(target);
  if (!sync_path(directory, O_RDONLY | O_DIRECTORY)) {
    throw Error(ErrorKind::io,
                "cannot sync directory '" + directory + "' after renaming '" + target + "'");
  }
}

}  // namespace fsdp
