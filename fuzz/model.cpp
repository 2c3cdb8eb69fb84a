// Model descriptions (fsdp-plan --model: parameters_from_json) and transformer configurations
// (fsdp-plan --preset-config: transformer_config_from_json, then transformer_parameters, which
// fsdp-plan calls next). Every input goes to both readers; each gives its value or fsdp::Error.
// A parameter list read is written back (parameters_to_json) as text that reads back the same.
#include <cstdint>
#include <string>

#include "fsdp/shard/model_description.hpp"
#include "reader_contract.hpp"

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
  (void)fsdp_fuzz::value_or_error("transformer_config_from_json and transformer_parameters", [&] {
    return fsdp::transformer_parameters(fsdp::transformer_config_from_json(text, "fuzz config"));
  });
  return 0;
}
