#include "fsdp/io/publish_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fsdp/core/error.hpp"

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

void publish_file(const std::string& from, const std::string& to) {
  if (!sync_path(from, O_RDONLY)) {
    throw Error(ErrorKind::io, "cannot sync '" + from + "' to disk before renaming it");
  }
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw Error(ErrorKind::io, "cannot rename '" + from + "' to '" + to + "'");
  }
  // The rename is durable only once the directory entry is.
  const std::size_t slash = to.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "." : to.substr(0, slash + 1);
  if (!sync_path(directory, O_RDONLY | O_DIRECTORY)) {
    throw Error(ErrorKind::io,
                "cannot sync directory '" + directory + "' after renaming '" + to + "'");
  }
}

}  // namespace fsdp
