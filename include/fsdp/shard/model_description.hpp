// Parameter lists from a model description (JSON) or generated for a standard transformer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/shard/parameter_info.hpp"

namespace fsdp {

// {"parameters": [{"name": "h.0.attn.w", "shape": [768, 2304], "dtype": "fp32",
//                  "layer": "h.0", "always_gather": false}, ...]}
// dtype defaults to fp32, layer to "" and always_gather to false. Throws Error naming the file
// (source), the parameter (by index and name) and the field that is wrong; the list is validated
// with validate_parameters.
std::vector<ParameterInfo> parameters_from_json(const std::string& text, const std::string& source);
std::vector<ParameterInfo> read_model_description(const std::string& path);
std::string parameters_to_json(const std::vector<ParameterInfo>& parameters, int indent = 2);

enum class TransformerFamily : std::uint8_t {
  gpt2,   // learned positions, LayerNorm with bias, 4*hidden MLP, biases, tied LM head
  llama,  // RMSNorm, SwiGLU MLP, no biases, grouped-query attention, separate LM head
};

struct TransformerConfig {
  TransformerFamily family = TransformerFamily::gpt2;
  int layers = 12;
  std::int64_t hidden = 768;
  int heads = 12;
  std::int64_t vocab = 50257;
  std::int64_t max_positions = 1024;  // gpt2: size of the position embedding
  int kv_heads = 0;                   // llama: 0 means heads
  std::int64_t intermediate = 0;      // MLP width; 0: 4*hidden (gpt2) or Llama's rounded 8/3*hidden
  bool tie_embeddings = true;         // gpt2 default true; llama presets set false
  DType dtype = DType::f32;

  // GPT-2 small (124M) and Llama-2 7B, the defaults of the presets.
  static TransformerConfig gpt2_small();
  static TransformerConfig llama2_7b();
};
// "gpt2", "llama"
TransformerFamily parse_family(const std::string& name);
const char* name_of(TransformerFamily family);

// {"family": "llama", "layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000, ...}: the fields
// of TransformerConfig; missing ones take the family's preset default.
TransformerConfig transformer_config_from_json(const std::string& text, const std::string& source);

// The parameters of the transformer with Hugging Face-style names and one layer per block
// ("h.3" or "layers.3"), plus "embeddings", "final_norm" and (untied llama) "lm_head".
// Throws Error when hidden is not a multiple of heads, or kv_heads does not divide heads.
std::vector<ParameterInfo> transformer_parameters(const TransformerConfig& config);

}  // namespace fsdp
