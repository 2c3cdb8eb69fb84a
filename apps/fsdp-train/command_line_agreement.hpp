// Every rank of an fsdp-train job must run with the same options: ranks started with different
// --seed, --lr or --batch-size would otherwise train to a wrong model (rank 0's plan silently
// wins) or fail deep inside MPI. Before anything else collective happens, the ranks compare
// their options (as parsed: "--epochs 3" and "--epochs=3" agree) by the library's rule for
// configurations (fsdp::require_same_configuration: one small all-reduce when they agree), and
// every rank fails naming the first option that differs.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "fsdp/comm/configuration_agreement.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp_train {

// What a rank that could not parse its command line takes part in the agreement with.
constexpr const char* kUnparsable = "(does not parse) ";

// Ranks were given different command lines: every rank has this error, with the same message
// (main exits with the usage code on it).
class CommandLineDisagreement : public std::runtime_error {
 public:
  explicit CommandLineDisagreement(const std::string& message) : std::runtime_error(message) {}
};

// options: one "name=value" line per option, in a fixed order (CLI11's config_to_str), or
// kUnparsable + the parse error on a rank that could not parse its command line. Collective;
// throws CommandLineDisagreement on every rank when any rank's options differ from another's.
inline void require_same_command_line(fsdp::ProcessGroup& group, const std::string& options) {
  fsdp::Configuration configuration("command line");
  const bool parses = options.rfind(kUnparsable, 0) != 0;
  // The parse error first, so that a rank that cannot parse is named as such, not by an option.
  configuration.text("parse error",
                     parses ? "none" : options.substr(std::string(kUnparsable).size()));
  if (parses) {
    std::istringstream lines(options);
    std::string line;
    while (std::getline(lines, line)) {
      const std::size_t equals = line.find('=');
      configuration.text("--" + line.substr(0, equals),
                         equals == std::string::npos ? "" : line.substr(equals + 1));
    }
  }
  try {
    fsdp::require_same_configuration(configuration, group);
  } catch (const fsdp::Error& error) {
    throw CommandLineDisagreement(error.message());
  }
}

}  // namespace fsdp_train
