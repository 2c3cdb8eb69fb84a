// Readers that take a path get the fuzz input through a file of this process: in /dev/shm (memory,
// no disk traffic per input) or, without it, the temporary directory. One name per process and
// purpose, rewritten for every input and removed when the process exits.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "reader_contract.hpp"

namespace fsdp_fuzz {

namespace detail {
inline std::set<std::string>& scratch_paths() {
  static std::set<std::string> paths;
  return paths;
}
inline void remove_scratch_files() {
  for (const std::string& path : scratch_paths()) {
    std::remove(path.c_str());
  }
}
}  // namespace detail

// "<dir>/fsdp-fuzz-<pid>-<name>", removed at exit.
inline std::string scratch_path(const std::string& name) {
  struct stat status {};
  const std::string directory = ::stat("/dev/shm", &status) == 0 && S_ISDIR(status.st_mode)
                                    ? std::string("/dev/shm")
                                    : std::filesystem::temp_directory_path().string();
  const std::string path =
      directory + "/fsdp-fuzz-" + std::to_string(static_cast<long>(::getpid())) + "-" + name;
  if (detail::scratch_paths().empty()) {
    std::atexit(detail::remove_scratch_files);
  }
  detail::scratch_paths().insert(path);
  return path;
}

// scratch_path(name) holding exactly these bytes.
inline std::string scratch_file(const std::string& name, const std::uint8_t* data,
                                std::size_t size) {
  const std::string path = scratch_path(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    finding("the harness could not write its scratch file " + path);
  }
  return path;
}

}  // namespace fsdp_fuzz
