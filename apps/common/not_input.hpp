// The tools' side of fsdp::require_not_input: an output that names one of the tool's own inputs
// is a usage error (exit 2), found before anything is read or written.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "fsdp/core/error.hpp"
#include "fsdp/core/regular_file.hpp"

namespace fsdp_apps {

// Throws CLI::ValidationError when output (given as output_option) is the file input (given as
// input_option) names, links followed; an empty or missing path names no file.
inline void require_not_input(const std::string& output, const std::string& output_option,
                              const std::string& input, const std::string& input_option) {
  try {
    fsdp::require_not_input(output, output_option, input, input_option);
  } catch (const fsdp::Error& error) {
    throw CLI::ValidationError(error.message());
  }
}

}  // namespace fsdp_apps
