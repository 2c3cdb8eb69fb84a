// The bounded JSON parser every JSON reader goes through (src/core/json_input.hpp): any bytes
// parse or give fsdp::Error; what parses can be quoted as a short excerpt and written back as
// text that parses to the same value.
#include <cstdint>
#include <string>

#include "core/json_input.hpp"
#include "reader_contract.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto value = fsdp_fuzz::value_or_error(
      "parse_json_input", [&] { return fsdp::parse_json_input(text, "fuzz input"); });
  if (!value) {
    return 0;
  }
  fsdp_fuzz::must_succeed("quoting and writing back the value", [&] {
    if (fsdp::json_excerpt(*value).size() > fsdp::kMostExcerpt + 3) {
      fsdp_fuzz::finding("json_excerpt is longer than kMostExcerpt + \"...\"");
    }
    if (fsdp::parse_json_input(value->dump(), "the value written back") != *value) {
      fsdp_fuzz::finding("the value written back parses to another value");
    }
  });
  return 0;
}
