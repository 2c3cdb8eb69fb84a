// --help wrapped to the reader's width (output_columns, terminal_width.hpp). CLI11 2.1 prints every
// description on one line however long, and a terminal then breaks it inside words, at its own
// edge, back at column 0. Here descriptions are broken between words and continue in their
// column; the tool's description, usage line and footer are wrapped as paragraphs. Every tool
// calls wrap_help right after making its CLI::App, before adding subcommands, which take the
// formatter of their parent when they are made.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "terminal_width.hpp"

namespace fsdp_apps {

// text broken between words so that no line passes `width` columns where words allow (a word
// longer than a line stands alone). Its first character is printed at column `first`; every later
// line, after text's own newlines or a break, begins at column `rest`, and a line of text that
// begins with spaces keeps them when it is broken.
inline std::string wrap_words(const std::string& text, std::size_t width, std::size_t first,
                              std::size_t rest) {
  std::string out;
  std::size_t line_begin = 0;
  while (true) {
    std::size_t line_end = text.find('\n', line_begin);
    if (line_end == std::string::npos) {
      line_end = text.size();
    }
    const std::string line = text.substr(line_begin, line_end - line_begin);
    if (line_begin > 0 && !line.empty()) {
      out += std::string(rest, ' ');
    }
    const std::size_t own = std::min(line.find_first_not_of(' '), line.size());
    out += line.substr(0, own);
    std::size_t column = (line_begin == 0 ? first : rest) + own;
    const std::size_t continuation = rest + own;
    bool first_word = true;
    for (std::size_t word_begin = line.find_first_not_of(' ', own);
         word_begin != std::string::npos;) {
      std::size_t word_end = line.find(' ', word_begin);
      if (word_end == std::string::npos) {
        word_end = line.size();
      }
      const std::size_t length = word_end - word_begin;
      if (!first_word && column + 1 + length > width) {
        out += "\n" + std::string(continuation, ' ');
        column = continuation;
      } else if (!first_word) {
        out += ' ';
        ++column;
      }
      out += line.substr(word_begin, length);
      column += length;
      first_word = false;
      word_begin = line.find_first_not_of(' ', word_end);
    }
    if (line_end == text.size()) {
      return out;
    }
    out += '\n';
    line_begin = line_end + 1;
  }
}

class WrappedHelp : public CLI::Formatter {
 public:
  // The description column begins at CLI11's column 30 on 80 columns, further left on fewer,
  // so that descriptions keep most of a narrow line.
  explicit WrappedHelp(std::size_t width) : width_(width) {
    column_width(std::min<std::size_t>(get_column_width(), width * 3 / 8));
  }

  std::string make_option(const CLI::Option* option, bool is_positional) const override {
    return two_columns(make_option_name(option, is_positional) + make_option_opts(option),
                       make_option_desc(option));
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    return two_columns(sub->get_display_name(true), sub->get_description());
  }
  std::string make_description(const CLI::App* app) const override {
    return wrap_words(CLI::Formatter::make_description(app), width_, 0, 0);
  }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return wrap_words(CLI::Formatter::make_usage(app, std::move(name)), width_, 0, 4);
  }
  std::string make_footer(const CLI::App* app) const override {
    return wrap_words(CLI::Formatter::make_footer(app), width_, 0, 0);
  }

 private:
  // CLI11's layout (the name from column 2, the description from column_width_, on a line of its
  // own under a name that reaches it), with the description wrapped inside its column. A name too
  // long for a line (an option's type, range and exclusions) continues further indented.
  std::string two_columns(const std::string& name, const std::string& description) const {
    std::string out = "  " + wrap_words(name, width_, 2, 6);
    if (!description.empty()) {
      const std::size_t last_line = out.size() - (out.rfind('\n') + 1);  // npos + 1 is 0
      out += out.find('\n') != std::string::npos || last_line >= column_width_
                 ? "\n" + std::string(column_width_, ' ')
                 : std::string(column_width_ - last_line, ' ');
      out += wrap_words(description, width_, column_width_, column_width_);
    }
    return out + "\n";
  }
  std::size_t width_;
};

// Gives app (and the subcommands added to it afterwards) help wrapped to output_columns().
inline void wrap_help(CLI::App& app) {
  app.formatter(std::make_shared<WrappedHelp>(static_cast<std::size_t>(output_columns())));
}

}  // namespace fsdp_apps
