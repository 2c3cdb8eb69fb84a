// JSON from files and other processes, parsed with bounds: fsdp's own documents (graphs, models,
// plans, checkpoint headers) nest a few levels, and a hostile or damaged one nested thousands of
// levels deep overflows the stack of whatever walks it (an error message that printed the value
// crashed fsdp-plan). Values quoted in messages are short excerpts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp {

constexpr int kMostJsonDepth = 32;
constexpr std::size_t kMostExcerpt = 64;

// Parses text; throws fsdp::Error "<source> is not valid JSON: ..." or "... nests deeper than
// 32 levels".
inline nlohmann::json parse_json_input(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(
        text, [&source](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMostJsonDepth) {
            throw Error(source + " nests deeper than " + std::to_string(kMostJsonDepth) +
                        " levels; fsdp's files nest a few");
          }
          return true;
        });
  } catch (const nlohmann::json::exception& error) {
    throw Error(source + " is not valid JSON: " + error.what());
  }
}

// value as JSON text, cut to kMostExcerpt characters ("..." marks a cut).
inline std::string json_excerpt(const nlohmann::json& value) {
  const std::string text = value.dump();
  return text.size() <= kMostExcerpt ? text : text.substr(0, kMostExcerpt) + "...";
}

}  // namespace fsdp
