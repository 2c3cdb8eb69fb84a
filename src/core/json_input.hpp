// JSON from files and other processes, parsed with bounds: fsdp's own documents (graphs, models,
// plans, checkpoint headers) nest a few levels, and a hostile or damaged one nested thousands of
// levels deep overflows the stack of whatever walks it (an error message that printed the value
// crashed fsdp-plan). Values quoted in messages are short excerpts.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

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

// value as an integer of type T; fsdp::Error "<what> must be an integer from <min> to <max>, not
// <excerpt>" for anything else. nlohmann's get<int>() takes 3.7 as 3 and casts 1e300 (undefined
// behaviour), and get<std::int64_t>() takes 2^64 - 1 as -1.
template <class T>
T json_integer(const nlohmann::json& value, const std::string& what) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "an integer type");
  using Limits = std::numeric_limits<T>;
  bool fits = false;
  if (value.is_number_unsigned()) {
    fits = value.get<std::uint64_t>() <= static_cast<std::uint64_t>(Limits::max());
  } else if (value.is_number_integer()) {
    const auto number = value.get<std::int64_t>();
    fits = number >= static_cast<std::int64_t>(Limits::min()) &&
           (number < 0 ||
            static_cast<std::uint64_t>(number) <= static_cast<std::uint64_t>(Limits::max()));
  }
  if (!fits) {
    throw Error(what + " must be an integer from " + std::to_string(Limits::min()) + " to " +
                std::to_string(Limits::max()) + ", not " + json_excerpt(value));
  }
  return value.is_number_unsigned() ? static_cast<T>(value.get<std::uint64_t>())
                                    : static_cast<T>(value.get<std::int64_t>());
}

// A list of integers of type T; the same errors, naming the element ("<what>[2] must be ...").
template <class T>
std::vector<T> json_integers(const nlohmann::json& value, const std::string& what) {
  if (!value.is_array()) {
    throw Error(what + " must be a list of integers, not " + json_excerpt(value));
  }
  std::vector<T> numbers;
  numbers.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    numbers.push_back(json_integer<T>(value[i], what + "[" + std::to_string(i) + "]"));
  }
  return numbers;
}

}  // namespace fsdp
