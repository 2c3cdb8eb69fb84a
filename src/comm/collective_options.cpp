#include "fsdp/comm/collective_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp {

CollectiveOptions CollectiveOptions::from_environment() {
  CollectiveOptions options;
#ifndef NDEBUG
  options.check_arguments = true;
#endif
  if (const char* value = std::getenv("FSDP_CHECK_COLLECTIVES")) {
    const std::string text(value);
    if (text == "1" || text == "ON" || text == "on" || text == "true") {
      options.check_arguments = true;
    } else if (text == "0" || text == "OFF" || text == "off" || text == "false") {
      options.check_arguments = false;
    } else {
      throw Error("fsdp: FSDP_CHECK_COLLECTIVES='" + text + "' is not understood; use 1 or 0");
    }
  }
  if (const char* value = std::getenv("FSDP_COLLECTIVE_TIMEOUT_S")) {
    char* end = nullptr;
    errno = 0;
    const double seconds = std::strtod(value, &end);
    if (end == value || *end != '\0' || errno != 0 || !std::isfinite(seconds) || seconds < 0) {
      throw Error(std::string("fsdp: FSDP_COLLECTIVE_TIMEOUT_S='") + value +
                  "' is not a number of seconds >= 0 (0 waits forever, default 600)");
    }
    options.timeout_s = seconds;
  }
  return options;
}

}  // namespace fsdp
