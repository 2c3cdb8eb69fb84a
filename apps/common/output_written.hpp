// The last thing every fsdp tool does: make sure its output reached stdout. A tool whose stdout
// is a full disk or a closed pipe must not exit 0 after losing what it printed.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fsdp_apps {

// Returns code, or 1 (a runtime error) when stdout could not be written, saying so on stderr.
inline int output_written(const char* program, int code) {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    std::fprintf(stderr, "%s: cannot write the output to stdout (%s)\n", program,
                 errno != 0 ? std::strerror(errno) : "write error");
    return code != 0 ? code : 1;
  }
  return code;
}

}  // namespace fsdp_apps
