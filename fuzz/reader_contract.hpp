// The contract every fuzz target holds a reader to: on any bytes it returns a value or throws
// fsdp::Error. Any other exception escaping it, a crash, a sanitizer report, a hang or an
// allocation past libFuzzer's limit is a finding: the process aborts and the input is kept.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "fsdp/core/error.hpp"

namespace fsdp_fuzz {

// Prints the finding and aborts (libFuzzer then saves the input; the replay driver names it).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// FSDP_FUZZ_VERBOSE=1 prints what each reader made of each input (for looking at a corpus).
inline bool verbose() {
  static const bool on = std::getenv("FSDP_FUZZ_VERBOSE") != nullptr;
  return on;
}

// read()'s value, or nothing when it threw fsdp::Error (bad input, correctly refused).
template <class Read>
auto value_or_error(const char* reader, Read&& read) -> std::optional<decltype(read())> {
  try {
    auto value = std::forward<Read>(read)();
    if (verbose()) {
      std::fprintf(stderr, "  %s accepted it\n", reader);
    }
    return value;
  } catch (const fsdp::Error& error) {
    if (verbose()) {
      std::fprintf(stderr, "  %s refused it: %s\n", reader, error.what());
    }
    return std::nullopt;
  } catch (const std::exception& error) {
    finding(std::string(reader) +
            " let an exception other than fsdp::Error escape: " + error.what());
  } catch (...) {
    finding(std::string(reader) + " let a non-standard exception escape");
  }
}

// Runs a step that must succeed on what a reader accepted (writing it back, reading that again):
// any exception, fsdp::Error included, is a finding.
template <class Step>
void must_succeed(const char* step, Step&& run) {
  try {
    std::forward<Step>(run)();
  } catch (const std::exception& error) {
    finding(std::string(step) + " failed on what the reader accepted: " + error.what());
  }
}

}  // namespace fsdp_fuzz
