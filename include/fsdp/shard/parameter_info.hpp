// ParameterInfo: what a sharding plan needs to know about one parameter of the user's model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/dtype.hpp"

namespace fsdp {

struct ParameterInfo {
  std::string name;                 // unique within the model
  std::vector<std::int64_t> shape;  // every dimension >= 1; empty means a scalar (1 element)
  DType dtype = DType::f32;
  std::string layer;  // the unit the parameter is gathered with; empty: the parameter alone
  bool always_gather = false;  // replicated on every rank, never split (e.g. small embeddings)
  // false: frozen (fine-tuning). Gathered for compute like any other parameter, but it has no
  // gradient (never reduced), no optimizer state, and no step changes it; saved and loaded
  // with the rest.
  bool trainable = true;

  // Elements of the flattened parameter. Throws Error on an invalid shape.
  std::int64_t numel() const;
  // numel() * size_of(dtype): nothing assumes 4-byte elements.
  std::int64_t bytes() const;
  // The unit the parameter belongs to: layer, or the parameter's own name when layer is empty.
  const std::string& unit() const { return layer.empty() ? name : layer; }

  bool operator==(const ParameterInfo& other) const;
  bool operator!=(const ParameterInfo& other) const { return !(*this == other); }
};

// "name [768, 3072] fp32 layer 'h.0'" (plus " always_gather", " frozen"), for messages.
std::string describe(const ParameterInfo& parameter);

// The longest parameter name or layer, in bytes.
constexpr std::size_t kMostNameBytes = 1024;

// Throws Error naming the parameter and what is wrong: an empty list, an empty or duplicate name,
// a name or layer longer than kMostNameBytes or holding a NUL byte, a dimension < 1, an element
// count that overflows 64 bits, a dtype outside fsdp::DType.
void validate_parameters(const std::vector<ParameterInfo>& parameters);

// Throws Error unless world_size >= 1.
void validate_world_size(int world_size);

// Where two parameter lists first differ, with a message naming both sides.
struct ParameterListDifference {
  std::size_t index = 0;  // the first index whose entries differ (or where one list ends)
  std::string message;
};
// reference_label and other_label name the lists in the message, e.g. "rank 0" and "rank 3".
std::optional<ParameterListDifference> first_difference(const std::vector<ParameterInfo>& reference,
                                                        const std::vector<ParameterInfo>& other,
                                                        const std::string& reference_label,
                                                        const std::string& other_label);

}  // namespace fsdp
