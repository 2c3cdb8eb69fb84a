// "1 rank", "4 ranks": a count and its noun, in the plural unless the count is one.
#pragma once

#include <string>

namespace fsdp_apps {

inline std::string count_of(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace fsdp_apps
