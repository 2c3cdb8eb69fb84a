// JSON from files and other processes, parsed with bounds: fsdp's own documents (graphs, models,
// plans, checkpoint headers) nest a few levels, and a hostile or damaged one nested thousands of
// levels deep overflows the stack of whatever walks it (an error message that printed the value
// crashed fsdp-plan). Values quoted in messages are short excerpts. A key given twice in one
// object is an error: nlohmann keeps the last silently, so a plan with two "world_size" keys
// would mean what one reader happened to keep.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {

constexpr int kMostJsonDepth = 32;
constexpr std::size_t kMostExcerpt = 64;

// value as JSON text, cut to kMostExcerpt characters ("..." marks a cut).
inline std::string json_excerpt(const nlohmann::json& value) {
  const std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return text.size() <= kMostExcerpt ? text : text.substr(0, kMostExcerpt) + "...";
}

// Parses text; throws fsdp::Error "<source> is not valid JSON: ...", "... nests deeper than
// 32 levels" or "... has the key "k" twice in one object".
inline nlohmann::json parse_json_input(const std::string& text, const std::string& source) {
  // The keys of every object being parsed, the innermost last (at most kMostJsonDepth of them).
  std::vector<std::set<std::string>> keys;
  try {
    return nlohmann::json::parse(
        text,
        [&source, &keys](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (depth > kMostJsonDepth) {
            throw Error(source + " nests deeper than " + std::to_string(kMostJsonDepth) +
                        " levels; fsdp's files nest a few");
          }
          if (event == nlohmann::json::parse_event_t::object_start) {
            keys.emplace_back();
          } else if (event == nlohmann::json::parse_event_t::object_end) {
            keys.pop_back();
          } else if (event == nlohmann::json::parse_event_t::key &&
                     !keys.back().insert(parsed.get<std::string>()).second) {
            throw Error(source + " has the key " + json_excerpt(parsed) +
                        " twice in one object; keys must be unique");
          }
          return true;
        });
  } catch (const nlohmann::json::exception& error) {
    throw Error(source + " is not valid JSON: " + error.what());
  }
}

// value as an integer from lo to hi: a JSON integer (not 8.0, 8.9 or "8") within the range, else
// Error "<what> must be an integer from lo to hi, not <excerpt>". 2^32 + 8 is out of range, never
// truncated to 8.
inline std::int64_t json_integer(const nlohmann::json& value, std::int64_t lo, std::int64_t hi,
                                 const std::string& what) {
  // nlohmann keeps non-negative integers unsigned: those above 2^63 - 1 fit no range here.
  std::optional<std::int64_t> integer;
  if (value.is_number_unsigned()) {
    const std::uint64_t unsigned_value = value.get<std::uint64_t>();
    if (unsigned_value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      integer = static_cast<std::int64_t>(unsigned_value);
    }
  } else if (value.is_number_integer()) {
    integer = value.get<std::int64_t>();
  }
  if (!integer || *integer < lo || *integer > hi) {
    throw Error(what + " must be an integer from " + std::to_string(lo) + " to " +
                std::to_string(hi) + ", not " + json_excerpt(value));
  }
  return *integer;
}

// Throws Error "<where> has an unknown field "k"; the fields are <fields>" for a key of object
// outside known (a misspelt field would otherwise be ignored).
inline void require_known_fields(const nlohmann::json& object, const std::set<std::string>& known,
                                 const std::string& where) {
  for (const auto& item : object.items()) {
    if (known.count(item.key()) == 0) {
      throw Error(where + " has an unknown field " + json_excerpt(item.key()) +
                  "; the fields are " + join({known.begin(), known.end()}));
    }
  }
}

// value as an integer of type T (int, std::int64_t, ...): json_integer over T's whole range.
// nlohmann's get<int>() takes 3.7 as 3 and casts 1e300 (undefined behaviour), and
// get<std::int64_t>() takes 2^64 - 1 as -1.
template <class T>
T json_integer(const nlohmann::json& value, const std::string& what) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>, "a signed integer type");
  using Limits = std::numeric_limits<T>;
  return static_cast<T>(json_integer(value, Limits::min(), Limits::max(), what));
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
