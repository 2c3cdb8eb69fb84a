// Kokkos, started from the command line the way every fsdp tool starts it. Kokkos takes its own
// --kokkos-* options out of argv as usual, but it does not see --help (it would print its
// 40-line banner before the tool's help; the tool's help names Kokkos's options in one line,
// kKokkosOptions), and an option Kokkos refuses (--kokkos-threads=-1) is a usage error the tool
// reports like its own, not an exception that escapes main.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "usage_exit.hpp"

namespace fsdp_apps {

constexpr const char* kKokkosOptions =
    "Kokkos's options are accepted too: --kokkos-threads=N, --kokkos-numa=N, "
    "--kokkos-device-id=N, --kokkos-num-devices=N, --kokkos-disable-warnings, "
    "--kokkos-tools-library=LIB, --kokkos-tools-args=ARGS (--kokkos-help describes them).";

class KokkosSession {
 public:
  // Initializes Kokkos from argv (removing its options from argc/argv). When Kokkos refuses an
  // option, Kokkos is not running and error() says why.
  KokkosSession(int& argc, char** argv) {
    static char hidden_help[] = "--fsdp-help-not-for-kokkos";
    std::string given;  // the Kokkos options, for the message: Kokkos's own may not name them
    for (int i = 1; i < argc; ++i) {
      if (std::strncmp(argv[i], "--kokkos-", 9) == 0) {
        given += (given.empty() ? "" : " ") + std::string(argv[i]);
      }
      if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
        argv[i] = hidden_help;
      }
    }
    try {
      Kokkos::initialize(argc, argv);
      initialized_ = true;
    } catch (const std::exception& refused) {
      // Kokkos's first sentence; it goes on about where it was raised and its traceback.
      const std::string what = refused.what();
      error_ = "Kokkos refused " + (given.empty() ? std::string("its options") : given) + ": " +
               what.substr(0, std::min(what.find('\n'), what.find(" Raised by")));
    }
    static char help[] = "--help";
    for (int i = 1; i < argc; ++i) {
      if (argv[i] == hidden_help) {
        argv[i] = help;
      }
    }
  }
  KokkosSession(const KokkosSession&) = delete;
  KokkosSession& operator=(const KokkosSession&) = delete;
  ~KokkosSession() {
    if (initialized_) {
      Kokkos::finalize();
    }
  }

  // Empty when Kokkos runs; else Kokkos's words for the option it refused.
  const std::string& error() const { return error_; }
  // True when Kokkos refused its options; then prints the usage error when print is true (under
  // MPI, one rank speaks: every rank was given the same options).
  bool refused(const char* program, bool print = true) const {
    if (!error_.empty() && print) {
      print_usage_error(program, error_);
    }
    return !error_.empty();
  }

 private:
  bool initialized_ = false;
  std::string error_;
};

}  // namespace fsdp_apps
