// CLI11 checks for floating-point options. CLI11's own Range, PositiveNumber and NonNegativeNumber
// let NaN through (every comparison with NaN is false), and infinity or a denormal FLOP rate turn
// into nonsense far from the option that caused it: these refuse them where they are given.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

namespace fsdp_apps {

// The whole of `text` as a double (strtod: infinity and NaN included), or false.
inline bool read_whole_number(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

// A finite number from min to max (both included); with min > 0, also a normal one (not a
// denormal such as 1e-320, whose reciprocal is infinite).
inline CLI::Validator finite_number(double min, double max = std::numeric_limits<double>::max()) {
  char range[96];
  std::snprintf(range, sizeof range, "a finite number from %g to %g", min, max);
  const std::string description = range;
  return CLI::Validator(
      [description, min, max](std::string& text) -> std::string {
        double value = 0;
        if (!read_whole_number(text, value)) {
          return "'" + text + "' is not a number: give " + description;
        }
        if (!std::isfinite(value) || value < min || value > max ||
            (min > 0 && !std::isnormal(value))) {
          return "'" + text + "' is not " + description;
        }
        return std::string();
      },
      "FLOAT");
}

// A finite number > 0 and normal: rates and sizes that something is divided by.
inline CLI::Validator positive_number() {
  return finite_number(std::numeric_limits<double>::min());
}

}  // namespace fsdp_apps
