// Model descriptions (fsdp-plan --model: parameters_from_json) and transformer configurations
// (fsdp-plan --preset-config: transformer_config_from_json, then transformer_parameters, which
// fsdp-plan calls next). Every input goes to both readers; each gives its value or fsdp::Error.
// A parameter list read is written back (parameters_to_json) as text that reads back the same; a
// configuration read holds the file's numbers.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "fsdp/shard/model_description.hpp"
#include "reader_contract.hpp"

namespace {

// A configuration read holds the file's numbers, not numbers cut to fit (4294967298 layers were
// read as 2).
void expect_fields_as_written(const std::string& text, const fsdp::TransformerConfig& config) {
  const nlohmann::json document = nlohmann::json::parse(text, nullptr, false);
  const std::pair<const char*, std::int64_t> fields[] = {{"layers", config.layers},
                                                         {"hidden", config.hidden},
                                                         {"heads", config.heads},
                                                         {"vocab", config.vocab},
                                                         {"max_positions", config.max_positions},
                                                         {"kv_heads", config.kv_heads},
                                                         {"intermediate", config.intermediate}};
  for (const auto& [name, value] : fields) {
    if (document.contains(name) && document[name] != value) {
      fsdp_fuzz::finding(std::string("transformer_config_from_json read \"") + name +
                         "\": " + document[name].dump() + " as " + std::to_string(value));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto parameters = fsdp_fuzz::value_or_error(
      "parameters_from_json", [&] { return fsdp::parameters_from_json(text, "fuzz model"); });
  if (parameters) {
    fsdp_fuzz::must_succeed("writing the parameters back and reading that", [&] {
      if (fsdp::parameters_from_json(fsdp::parameters_to_json(*parameters), "written back") !=
          *parameters) {
        fsdp_fuzz::finding("the parameters written back read as other parameters");
      }
    });
  }
  const auto config = fsdp_fuzz::value_or_error("transformer_config_from_json", [&] {
    return fsdp::transformer_config_from_json(text, "fuzz config");
  });
  if (config) {
    expect_fields_as_written(text, *config);
    (void)fsdp_fuzz::value_or_error("transformer_parameters",
                                    [&] { return fsdp::transformer_parameters(*config); });
  }
  return 0;
}
