// How wide a tool's lines may be, one rule for every tool: --help is wrapped to output_columns(),
// fsdp-train's progress bar is fitted to terminal_columns(). A terminal that reports no size is
// no terminal to write for: Open MPI's mpiexec gives every rank a pseudo-terminal, of its own
// terminal's size when its output is one, of 0 columns when its output is a file or a pipe.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace fsdp_apps {

// The columns of the terminal that fd is; 0 when it is not a terminal or reports no size.
inline int terminal_columns(int fd) {
  struct winsize size {};
  if (::isatty(fd) == 0 || ::ioctl(fd, TIOCGWINSZ, &size) != 0) {
    return 0;
  }
  return size.ws_col;
}

constexpr int kDefaultColumns = 80;  // a file, a pipe, mpiexec: the width text is read at anyway
constexpr int kFewestColumns = 40;   // narrower, a description column would hold a word a line

// The width of text for the reader of stdout: $COLUMNS when it holds a number (set on purpose:
// shells do not export it; GNU tools and Python's shutil.get_terminal_size read it first), else
// the width of stdout's terminal, else kDefaultColumns; never below kFewestColumns.
inline int output_columns() {
  int columns = 0;
  if (const char* text = std::getenv("COLUMNS")) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (errno == 0 && end != text && *end == '\0' && value > 0 && value < 100000) {
      columns = static_cast<int>(value);
    }
  }
  if (columns == 0) {
    columns = terminal_columns(STDOUT_FILENO);
  }
  if (columns == 0) {
    columns = kDefaultColumns;
  }
  return columns < kFewestColumns ? kFewestColumns : columns;
}

}  // namespace fsdp_apps
