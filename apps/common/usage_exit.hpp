// How every fsdp command-line tool ends: the usual conventions. --help and --version print on
// stdout and exit 0. A usage error (an unknown option, a missing argument, a bad option value)
// goes to stderr after the program's name and exits 2: option values are checked while the
// command line is parsed (CLI11 checks; parsed_by for the library's own parsers), so a value the
// tool refuses is never reported as a runtime error. Anything that fails afterwards (a file, the
// data, the machine) is a runtime error: exit 1. docs/user-guide.md states it for every tool.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "fsdp/comm/version.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp_apps {

constexpr int kExitError = 1;  // a runtime error
constexpr int kExitUsage = 2;  // a usage error, bad option values included

// A CLI11 check from one of the library's parsers of names (fsdp::parse_dtype,
// fsdp::parse_sharding_mode, ...): a value the parser refuses (fsdp::Error) is a usage error, with
// the parser's message saying what is accepted. `type` is the value's name in --help.
template <class Parse>
CLI::Validator parsed_by(Parse parse, const std::string& type) {
  return CLI::Validator(
      [parse](std::string& text) {
        try {
          (void)parse(text);
          return std::string();
        } catch (const fsdp::Error& error) {
          return std::string(error.message());
        }
      },
      type);
}

// A usage error on stderr: the program's name, what was wrong, where the options are listed.
inline void print_usage_error(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for the options.\n", program, message.c_str(),
               program);
}

// Edits (insertions, deletions, substitutions) that turn a into b.
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate nearest to word, if it is near enough to be a typo of it (at most a third of
// its letters wrong); "" otherwise.
inline std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = word.size() / 3 + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

// What to add to a parse error about words the tool does not know: the option or subcommand each
// was probably meant to be, and the subcommands when one is required and none was given.
inline std::string suggestions(const CLI::App& app) {
  const CLI::App* chosen = &app;
  for (const CLI::App* sub : app.get_subcommands()) {
    chosen = sub;  // the subcommand that was given: its options are the candidates
  }
  std::vector<std::string> options, subcommands;
  for (const CLI::App* scope : {&app, chosen}) {
    for (const CLI::Option* option : scope->get_options()) {
      for (const std::string& name : option->get_lnames()) {
        options.push_back("--" + name);
      }
    }
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    subcommands.push_back(sub->get_name());
  }
  std::string text;
  for (const std::string& word : app.remaining(true)) {
    const bool is_option = word.rfind("-", 0) == 0;
    const std::string name = word.substr(0, word.find('='));
    const std::string guess = nearest(name, is_option ? options : subcommands);
    if (!guess.empty()) {
      text += "\n  " + word + ": did you mean " + guess + "?";
    }
  }
  if (app.get_require_subcommand_min() > 0 && app.get_subcommands().empty() &&
      !subcommands.empty()) {
    text += "\n  subcommands:";
    for (const std::string& name : subcommands) {
      text += " " + name;
    }
  }
  return text;
}

// --version: "<program> <fsdp's version>" and fsdp::build_description's lines, on stdout; exit 0
// (usage_exit).
inline void add_version_flag(CLI::App& app, const char* program) {
  app.set_version_flag(
      "--version",
      [program] {
        std::string text =
            std::string(program) + " " + fsdp::version() + "\n" + fsdp::build_description();
        text.pop_back();  // CLI11 ends the line
        return text;
      },
      "print the version of fsdp, what it was built with, and exit");
}

// Prints what CLI11 reported (when print is true: with MPI, one rank speaks) and returns the
// exit code: 0 for --help and --version, kExitUsage for anything else.
inline int usage_exit(const CLI::App& app, const CLI::ParseError& error, const char* program,
                      bool print = true) {
  const bool help = error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success);
  if (print) {
    if (help) {
      app.exit(error);  // the help text, on stdout
    } else {
      print_usage_error(program, error.what() + suggestions(app));
    }
  }
  return help ? 0 : kExitUsage;
}

}  // namespace fsdp_apps
