#include "fsdp/shard/model_description.hpp"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../core/json_input.hpp"
#include "fsdp/core/enum_names.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {
namespace {

ParameterInfo parameter_from_json(const nlohmann::json& entry, std::size_t index,
                                  const std::string& source) {
  std::string where = std::string(source) + ": parameter #" + std::to_string(index);
  require(entry.is_object(), where + " must be an object with name, shape, dtype and layer");
  ParameterInfo parameter;
  require(entry.contains("name") && entry["name"].is_string(), where + " needs a \"name\" string");
  parameter.name = entry["name"].get<std::string>();
  where += " '" + parameter.name + "'";
  static const std::set<std::string> known = {"name",  "shape",         "dtype",
                                              "layer", "always_gather", "trainable"};
  for (const auto& item : entry.items()) {
    require(known.count(item.key()) != 0,
            where + " has an unknown field \"" + item.key() +
                "\"; the fields are name, shape, dtype, layer, always_gather, trainable");
  }
  require(entry.contains("shape") && entry["shape"].is_array(),
          where + " needs a \"shape\" array of positive integers ([] for a scalar)");
  for (const nlohmann::json& extent : entry["shape"]) {
    require(extent.is_number_integer(),
            where + ": \"shape\" must hold integers, not " + json_excerpt(extent));
    parameter.shape.push_back(extent.get<std::int64_t>());
  }
  if (entry.contains("dtype")) {
    require(entry["dtype"].is_string(), where + ": \"dtype\" must be a string such as \"fp32\"");
    try {
      parameter.dtype = parse_dtype(entry["dtype"].get<std::string>());
    } catch (const Error& error) {
      throw Error(where + ": " + message_of(error));
    }
  }
  if (entry.contains("layer")) {
    require(entry["layer"].is_string(), where + ": \"layer\" must be a string");
    parameter.layer = entry["layer"].get<std::string>();
  }
  if (entry.contains("always_gather")) {
    require(entry["always_gather"].is_boolean(),
            where + ": \"always_gather\" must be true or false");
    parameter.always_gather = entry["always_gather"].get<bool>();
  }
  if (entry.contains("trainable")) {
    require(entry["trainable"].is_boolean(), where + ": \"trainable\" must be true or false");
    parameter.trainable = entry["trainable"].get<bool>();
  }
  return parameter;
}

std::int64_t llama_intermediate(std::int64_t hidden) {
  // Llama's FeedForward: int(2 * 4h / 3) rounded up to a multiple of 256.
  const std::int64_t base = 2 * 4 * hidden / 3;
  return 256 * ((base + 255) / 256);
}

const EnumNames<TransformerFamily>& family_names() {
  static const EnumNames<TransformerFamily> names(
      "transformer family",
      {{TransformerFamily::gpt2, "gpt2"}, {TransformerFamily::llama, "llama"}},
      {{"gpt-2", TransformerFamily::gpt2}});
  return names;
}

}  // namespace

std::vector<ParameterInfo> parameters_from_json(const std::string& text,
                                                const std::string& source) {
  const nlohmann::json document = parse_json_input(text, source);
  require(
      document.is_object() && document.contains("parameters") && document["parameters"].is_array(),
      std::string(source) +
          " must be a JSON object with a \"parameters\" array of "
          "{\"name\", \"shape\", \"dtype\", \"layer\"} objects");
  for (const auto& item : document.items()) {
    require(item.key() == "parameters", std::string(source) + ": unknown top-level field \"" +
                                            item.key() +
                                            "\"; a model description has only \"parameters\"");
  }
  std::vector<ParameterInfo> parameters;
  std::size_t index = 0;
  for (const nlohmann::json& entry : document["parameters"]) {
    parameters.push_back(parameter_from_json(entry, index++, source));
  }
  try {
    validate_parameters(parameters);
  } catch (const Error& error) {
    throw Error(std::string(source) + ": " + message_of(error));
  }
  return parameters;
}

std::vector<ParameterInfo> read_model_description(const std::string& path) {
  return parameters_from_json(read_text_file(path, "model description"),
                              "model description '" + path + "'");
}

std::string parameters_to_json(const std::vector<ParameterInfo>& parameters, int indent) {
  nlohmann::json list = nlohmann::json::array();
  for (const ParameterInfo& p : parameters) {
    list.push_back({{"name", p.name},
                    {"shape", p.shape},
                    {"dtype", name_of(p.dtype)},
                    {"layer", p.layer},
                    {"always_gather", p.always_gather}});
    if (!p.trainable) {
      list.back()["trainable"] = false;  // written only when frozen: older readers take the rest
    }
  }
  return nlohmann::json{{"parameters", std::move(list)}}.dump(indent);
}

TransformerConfig TransformerConfig::gpt2_small() {
  return TransformerConfig{};
}

TransformerConfig TransformerConfig::llama2_7b() {
  TransformerConfig config;
  config.family = TransformerFamily::llama;
  config.layers = 32;
  config.hidden = 4096;
  config.heads = 32;
  config.vocab = 32000;
  config.max_positions = 4096;  // RoPE: no position parameters
  config.tie_embeddings = false;
  return config;
}

TransformerFamily parse_family(const std::string& name) {
  return family_names().parse(name);
}

const char* name_of(TransformerFamily family) {
  return family_names().name_of(family);
}

TransformerConfig transformer_config_from_json(const std::string& text, const std::string& source) {
  const nlohmann::json document = parse_json_input(text, source);
  const std::string& where = source;
  require(document.is_object() && document.contains("family") && document["family"].is_string(),
          where + " needs a \"family\": \"gpt2\" or \"llama\"");
  TransformerConfig config;
  try {
    config = parse_family(document["family"].get<std::string>()) == TransformerFamily::llama
                 ? TransformerConfig::llama2_7b()
                 : TransformerConfig::gpt2_small();
  } catch (const Error& error) {
    throw Error(where + ": " + message_of(error));
  }
  for (const auto& item : document.items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    // Whole numbers of the field's type (4294967298 layers were 2, 3.5 was refused by no rule);
    // transformer_parameters checks the ranges.
    const std::string field = where + ": \"" + key + "\"";
    if (key == "family") {
      continue;
    } else if (key == "layers") {
      config.layers = json_integer<int>(value, field);
    } else if (key == "hidden") {
      config.hidden = json_integer<std::int64_t>(value, field);
    } else if (key == "heads") {
      config.heads = json_integer<int>(value, field);
    } else if (key == "vocab") {
      config.vocab = json_integer<std::int64_t>(value, field);
    } else if (key == "max_positions") {
      config.max_positions = json_integer<std::int64_t>(value, field);
    } else if (key == "kv_heads") {
      config.kv_heads = json_integer<int>(value, field);
    } else if (key == "intermediate") {
      config.intermediate = json_integer<std::int64_t>(value, field);
    } else if (key == "tie_embeddings") {
      require(value.is_boolean(), field + " must be true or false");
      config.tie_embeddings = value.get<bool>();
    } else if (key == "dtype") {
      require(value.is_string(), field + " must be a string such as \"bf16\"");
      try {
        config.dtype = parse_dtype(value.get<std::string>());
      } catch (const Error& error) {
        throw Error(field + ": " + message_of(error));
      }
    } else {
      throw Error(where + ": unknown field \"" + key +
                  "\"; the fields are family, layers, hidden, heads, vocab, max_positions, "
                  "kv_heads, intermediate, tie_embeddings, dtype");
    }
  }
  return config;
}

std::vector<ParameterInfo> transformer_parameters(const TransformerConfig& c) {
  const std::string what = std::string(name_of(c.family)) + " preset: ";
  // Far beyond any real transformer, and small enough that the list stays small (12 parameters a
  // layer: 2,000,000,000 layers filled all memory) and that no size computed here (at most
  // 8 * hidden) overflows; each parameter's element count is checked where it is used.
  constexpr std::int64_t kMostLayers = std::int64_t{1} << 16;
  constexpr std::int64_t kMostWidth = std::int64_t{1} << 40;
  const auto in_range = [&](const char* name, std::int64_t value, std::int64_t lo, std::int64_t hi,
                            const char* zero) {
    require(value >= lo && value <= hi, what + name + " must be from " + std::to_string(lo) +
                                            " to " + std::to_string(hi) + zero + ", got " +
                                            std::to_string(value));
  };
  in_range("layers", c.layers, 1, kMostLayers, "");
  in_range("hidden", c.hidden, 1, kMostWidth, "");
  in_range("heads", c.heads, 1, kMostWidth, "");
  in_range("vocab", c.vocab, 1, kMostWidth, "");
  in_range("intermediate", c.intermediate, 0, kMostWidth, " (0: the family's default)");
  in_range("kv_heads", c.kv_heads, 0, c.heads, " (0: heads)");
  require(c.hidden % c.heads == 0, what + "hidden (" + std::to_string(c.hidden) +
                                       ") must be a multiple of heads (" + std::to_string(c.heads) +
                                       ")");
  std::vector<ParameterInfo> out;
  const auto add = [&](std::string name, std::vector<std::int64_t> shape, std::string layer) {
    out.push_back(
        ParameterInfo{std::move(name), std::move(shape), c.dtype, std::move(layer), false});
  };
  const std::int64_t h = c.hidden;
  if (c.family == TransformerFamily::gpt2) {
    const std::int64_t inner = c.intermediate > 0 ? c.intermediate : 4 * h;
    in_range("max_positions", c.max_positions, 1, kMostWidth, "");
    add("transformer.wte.weight", {c.vocab, h}, "embeddings");
    add("transformer.wpe.weight", {c.max_positions, h}, "embeddings");
    for (int i = 0; i < c.layers; ++i) {
      const std::string layer = "h." + std::to_string(i);
      const std::string p = "transformer." + layer + ".";
      add(p + "ln_1.weight", {h}, layer);
      add(p + "ln_1.bias", {h}, layer);
      add(p + "attn.c_attn.weight", {h, 3 * h}, layer);  // GPT-2's Conv1D stores [in, out]
      add(p + "attn.c_attn.bias", {3 * h}, layer);
      add(p + "attn.c_proj.weight", {h, h}, layer);
      add(p + "attn.c_proj.bias", {h}, layer);
      add(p + "ln_2.weight", {h}, layer);
      add(p + "ln_2.bias", {h}, layer);
      add(p + "mlp.c_fc.weight", {h, inner}, layer);
      add(p + "mlp.c_fc.bias", {inner}, layer);
      add(p + "mlp.c_proj.weight", {inner, h}, layer);
      add(p + "mlp.c_proj.bias", {h}, layer);
    }
    add("transformer.ln_f.weight", {h}, "final_norm");
    add("transformer.ln_f.bias", {h}, "final_norm");
    if (!c.tie_embeddings) {
      add("lm_head.weight", {c.vocab, h}, "lm_head");
    }
    return out;
  }
  const int kv_heads = c.kv_heads > 0 ? c.kv_heads : c.heads;
  require(c.heads % kv_heads == 0, what + "kv_heads (" + std::to_string(kv_heads) +
                                       ") must divide heads (" + std::to_string(c.heads) + ")");
  const std::int64_t head_dim = h / c.heads;
  const std::int64_t kv = kv_heads * head_dim;
  const std::int64_t inner = c.intermediate > 0 ? c.intermediate : llama_intermediate(h);
  add("model.embed_tokens.weight", {c.vocab, h}, "embeddings");
  for (int i = 0; i < c.layers; ++i) {
    const std::string layer = "layers." + std::to_string(i);
    const std::string p = "model." + layer + ".";
    add(p + "input_layernorm.weight", {h}, layer);
    add(p + "self_attn.q_proj.weight", {h, h}, layer);  // nn.Linear stores [out, in]
    add(p + "self_attn.k_proj.weight", {kv, h}, layer);
    add(p + "self_attn.v_proj.weight", {kv, h}, layer);
    add(p + "self_attn.o_proj.weight", {h, h}, layer);
    add(p + "post_attention_layernorm.weight", {h}, layer);
    add(p + "mlp.gate_proj.weight", {inner, h}, layer);
    add(p + "mlp.up_proj.weight", {inner, h}, layer);
    add(p + "mlp.down_proj.weight", {h, inner}, layer);
  }
  add("model.norm.weight", {h}, "final_norm");
  if (!c.tie_embeddings) {
    add("lm_head.weight", {c.vocab, h}, "lm_head");
  }
  return out;
}

}  // namespace fsdp
