// How every fsdp command-line tool ends on a command line it cannot parse: the usual conventions
// (help on stdout and exit 0; a usage error on stderr, after the program's name, and exit 2).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>

namespace fsdp_apps {

constexpr int kExitUsage = 2;

// Prints what CLI11 reported (when print is true: with MPI, one rank speaks) and returns the
// exit code: 0 for --help and --version, kExitUsage for anything else.
inline int usage_exit(const CLI::App& app, const CLI::ParseError& error, const char* program,
                      bool print = true) {
  const bool help = error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success);
  if (print) {
    if (help) {
      app.exit(error);  // the help text, on stdout
    } else {
      std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", program, error.what(),
                   program);
    }
  }
  return help ? 0 : kExitUsage;
}

}  // namespace fsdp_apps
