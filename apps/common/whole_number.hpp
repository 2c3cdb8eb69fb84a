// A CLI11 check for options that take any 64-bit unsigned number (seeds): CLI11 on its own turns
// -1, 2^64 and 2^65 into the same 2^64-1, so three different seeds would silently be one.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace fsdp_apps {

inline CLI::Validator whole_number_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::string range = "a whole number from 0 to 18446744073709551615";
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
          return "'" + text + "' is not " + range;
        }
        errno = 0;
        std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE) {
          return "'" + text + "' is larger than 18446744073709551615: give " + range;
        }
        return std::string();
      },
      "UINT64");
}

}  // namespace fsdp_apps
