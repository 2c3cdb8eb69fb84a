#include "fsdp/comm/collective_options.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp {
namespace {

// Adds one problem to the options' environment_error.
void add_problem(CollectiveOptions& options, const std::string& problem) {
  options.environment_error += (options.environment_error.empty() ? "" : "; ") + problem;
}

// A 0/1 switch from the environment; unset, or malformed (a problem added), leaves value as it is.
void read_switch(CollectiveOptions& options, const char* variable, bool& value) {
  if (const char* text = std::getenv(variable)) {
    const std::string given(text);
    if (given == "1" || given == "ON" || given == "on" || given == "true") {
      value = true;
    } else if (given == "0" || given == "OFF" || given == "off" || given == "false") {
      value = false;
    } else {
      add_problem(options,
                  std::string(variable) + "='" + given + "' is not understood; use 1 or 0");
    }
  }
}

}  // namespace

CollectiveOptions CollectiveOptions::from_environment() {
  CollectiveOptions options;
  read_switch(options, "FSDP_CHECK_COLLECTIVES", options.check_arguments);
  read_switch(options, "FSDP_STAGE_HOST_BUFFERS", options.stage_host_buffers);
  if (const char* value = std::getenv("FSDP_COLLECTIVE_TIMEOUT_S")) {
    char* end = nullptr;
    errno = 0;
    const double seconds = std::strtod(value, &end);
    if (end == value || *end != '\0' || errno != 0 || !std::isfinite(seconds) || seconds < 0) {
      add_problem(options, std::string("FSDP_COLLECTIVE_TIMEOUT_S='") + value +
                               "' is not a number of seconds >= 0 (0 waits forever, default 600)");
    } else {
      options.timeout_s = seconds;
    }
  }
  if (const char* value = std::getenv("FSDP_NETWORK")) {
    try {
      options.network = parse_network(value);
    } catch (const Error& error) {
      add_problem(options, std::string("FSDP_NETWORK: ") + error.message());
    }
  }
  return options;
}

}  // namespace fsdp
