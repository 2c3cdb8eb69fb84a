// The kernel's account of this process (/proc/self/status): resident memory as the operating
// system sees it, independent of what fsdp's own MemoryReport tracks.
#pragma once

#include <fstream>
#include <string>

namespace fsdp_apps {

// A field of /proc/self/status in kB ("VmHWM:", "VmRSS:"); -1 when unavailable (not Linux).
inline long status_kb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, field.size(), field) == 0) {
      return std::stol(line.substr(field.size()));
    }
  }
  return -1;
}

}  // namespace fsdp_apps
