#include "fsdp/io/publish_file.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fsdp/core/error.hpp"
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

}  // namespace

std::string temporary_beside(const std::string& target) {
  constexpr const char* kSuffix = ".tmp";
  std::string name = target + ".XXXXXX" + kSuffix;
  const int fd = ::mkstemps(name.data(), static_cast<int>(std::char_traits<char>::length(kSuffix)));
  if (fd < 0) {
    throw Error(ErrorKind::io, "cannot create a temporary file beside '" + target + "' (" +
                                   std::strerror(errno) +
                                   "): does its directory exist, and may this job write there?");
  }
  if (::close(fd) != 0) {
    std::remove(name.c_str());
    throw Error(ErrorKind::io, "cannot close the new temporary file '" + name + "'");
  }
  return name;
}

namespace {

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash + 1);
}

}  // namespace

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
  if (!sync_path(from, O_RDONLY)) {
    throw Error(ErrorKind::io, "cannot sync '" + from + "' to disk before renaming it");
  }
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw Error(ErrorKind::io, "cannot rename '" + from + "' to '" + to + "'");
  }
  // The rename is durable only once the directory entry is.
  const std::string directory = directory_of(to);
  if (!sync_path(directory, O_RDONLY | O_DIRECTORY)) {
    throw Error(ErrorKind::io,
                "cannot sync directory '" + directory + "' after renaming '" + to + "'");
  }
}

}  // namespace fsdp
