#include "fsdp/core/text.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fsdp/core/error.hpp"
#include "fsdp/core/regular_file.hpp"

namespace fsdp {

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string text;
  for (std::size_t i = 0; i < items.size(); ++i) {
    text += (i == 0 ? "" : separator) + items[i];
  }
  return text;
}

std::string join_alternatives(const std::vector<std::string>& items) {
  std::string text;
  for (std::size_t i = 0; i < items.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  }
  return text;
}

std::string number_text(double value) {
  char buffer[32];
  for (int digits = 1; digits <= 17; ++digits) {  // 17 digits always read back
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) {
      break;
    }
  }
  return buffer;
}

std::string to_lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string quoted_name(const std::string& name) {
  constexpr std::size_t kMostQuoted = 64;
  std::string text = "'";
  for (std::size_t i = 0; i < name.size() && i < kMostQuoted; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    text += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  return text + (name.size() > kMostQuoted ? "...'" : "'");
}

std::string shape_text(const std::vector<std::int64_t>& shape, const char* brackets,
                       const char* separator) {
  std::string text(1, brackets[0]);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i ? separator : "") + std::to_string(shape[i]);
  }
  return text + brackets[1];
}

std::string read_text_file(const std::string& path, const std::string& what) {
  // Opened without blocking (a FIFO with no writer would wait forever) and checked to be a
  // regular file of at most kMostTextBytes before anything is read (/dev/zero never ends).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  require(fd >= 0, "cannot open " + what + " '" + path + "': " + std::strerror(errno),
          ErrorKind::io);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat status {};
  require(::fstat(fd, &status) == 0,
          "cannot read " + what + " '" + path + "': " + std::strerror(errno), ErrorKind::io);
  require_regular_mode(status.st_mode, path, what);
  require(status.st_size <= kMostTextBytes,
          what + " '" + path + "' has " + std::to_string(status.st_size) +
              " bytes; text inputs are at most " + std::to_string(kMostTextBytes) + " bytes",
          ErrorKind::io);
  std::string text(static_cast<std::size_t>(status.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::read(fd, text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    require(got > 0,
            "cannot read " + what + " '" + path + "'" +
                (got < 0 ? std::string(": ") + std::strerror(errno)
                         : std::string(": it became shorter while being read")),
            ErrorKind::io);
    done += static_cast<std::size_t>(got);
  }
  return text;
}

std::string bytes_text(double bytes, int decimals) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.*f %s", unit == 0 ? 0 : decimals, bytes, units[unit]);
  return text;
}

}  // namespace fsdp
