#include "fsdp/shard/parameter_info.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {
namespace {

bool dtype_is_known(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::f64:
    case DType::bf16:
    case DType::f16:
    case DType::i32:
    case DType::i64:
      return true;
  }
  return false;
}

std::string label(const ParameterInfo& parameter, std::size_t index) {
  return "parameter #" + std::to_string(index) + " '" + parameter.name + "'";
}

// Element count and bytes with every check; prefix() names the parameter in messages. It is
// called only to build a message: numel() runs in loops over parameters and ranks, and building
// three messages per call made the plan tests 200 times slower under the sanitizers (every string
// allocation records a stack trace there) than in a normal build.
template <typename Prefix>
std::int64_t checked_numel(const ParameterInfo& parameter, const Prefix& prefix) {
  if (!dtype_is_known(parameter.dtype)) {
    throw Error(ErrorKind::usage, prefix() + " has an unknown dtype (code " +
                                      std::to_string(static_cast<int>(parameter.dtype)) +
                                      "); use fp32, fp64, bf16, fp16, int32 or int64");
  }
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() /
                             static_cast<std::int64_t>(size_of(parameter.dtype));
  std::int64_t numel = 1;
  for (std::size_t d = 0; d < parameter.shape.size(); ++d) {
    const std::int64_t extent = parameter.shape[d];
    if (extent < 1) {
      throw Error(ErrorKind::usage, prefix() + " has shape " + shape_text(parameter.shape) +
                                        ": dimension " + std::to_string(d) + " is " +
                                        std::to_string(extent) +
                                        "; every dimension must be >= 1 (a scalar has shape [])");
    }
    if (numel > limit / extent) {
      throw Error(ErrorKind::usage, prefix() + " has shape " + shape_text(parameter.shape) +
                                        ": its size in bytes overflows 64 bits");
    }
    numel *= extent;
  }
  return numel;
}

// A name or layer: at most kMostNameBytes bytes (messages quote names whole) and no NUL byte (HDF5
// plan files, checkpoints and the C API hold names as C strings: a NUL would cut the name, and the
// plan could not be read back). Messages quote the first kExcerpt bytes.
void check_text(const std::string& text, const char* field, std::size_t index) {
  const std::size_t nul = text.find('\0');
  if (text.size() <= kMostNameBytes && nul == std::string::npos) {
    return;  // messages are built only for a failure, as in checked_numel
  }
  constexpr std::size_t kExcerpt = 64;
  std::string shown;  // a NUL shown as \0: one in a message would end its C string
  for (std::size_t i = 0; i < std::min(text.size(), kExcerpt); ++i) {
    shown += text[i] == '\0' ? std::string("\\0") : std::string(1, text[i]);
  }
  shown += text.size() > kExcerpt ? "..." : "";
  const std::string prefix =
      "parameter #" + std::to_string(index) + " (" + field + " '" + shown + "')";
  require(text.size() <= kMostNameBytes, prefix + " has a " + field + " of " +
                                             std::to_string(text.size()) + " bytes; at most " +
                                             std::to_string(kMostNameBytes) + " are allowed");
  require(nul == std::string::npos, prefix + " has a NUL byte in its " + field + " (byte " +
                                        std::to_string(nul) +
                                        "); names and layers are C strings in plan files, "
                                        "checkpoints and the C API");
}

}  // namespace

std::int64_t ParameterInfo::numel() const {
  return checked_numel(*this, [this] { return "parameter '" + name + "'"; });
}

std::int64_t ParameterInfo::bytes() const {
  return numel() * static_cast<std::int64_t>(size_of(dtype));
}

bool ParameterInfo::operator==(const ParameterInfo& other) const {
  return name == other.name && shape == other.shape && dtype == other.dtype &&
         layer == other.layer && always_gather == other.always_gather &&
         trainable == other.trainable;
}

std::string describe(const ParameterInfo& parameter) {
  const std::string dtype = dtype_is_known(parameter.dtype)
                                ? name_of(parameter.dtype)
                                : "dtype#" + std::to_string(static_cast<int>(parameter.dtype));
  return "'" + parameter.name + "' " + shape_text(parameter.shape) + " " + dtype + " layer '" +
         parameter.layer + "'" + (parameter.always_gather ? " always_gather" : "") +
         (parameter.trainable ? "" : " frozen");
}

void validate_parameters(const std::vector<ParameterInfo>& parameters) {
  require(!parameters.empty(),
          "the parameter list is empty; a sharding plan needs at least one parameter");
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const ParameterInfo& parameter = parameters[i];
    if (parameter.name.empty()) {
      throw Error(ErrorKind::usage, "parameter #" + std::to_string(i) +
                                        " has an empty name; every parameter needs a unique name");
    }
    check_text(parameter.name, "name", i);
    check_text(parameter.layer, "layer", i);
    const auto [it, inserted] = seen.emplace(parameter.name, i);
    if (!inserted) {
      throw Error(ErrorKind::usage, "parameter name '" + parameter.name + "' appears twice (#" +
                                        std::to_string(it->second) + " and #" + std::to_string(i) +
                                        "); names must be unique");
    }
    checked_numel(parameter, [&] { return label(parameter, i); });
  }
}

void validate_world_size(int world_size) {
  require(world_size >= 1,
          "world size " + std::to_string(world_size) + " is invalid; a plan needs at least 1 rank");
}

std::optional<ParameterListDifference> first_difference(const std::vector<ParameterInfo>& reference,
                                                        const std::vector<ParameterInfo>& other,
                                                        const std::string& reference_label,
                                                        const std::string& other_label) {
  const std::size_t common = std::min(reference.size(), other.size());
  for (std::size_t i = 0; i < common; ++i) {
    if (reference[i] != other[i]) {
      return ParameterListDifference{i, "the parameter lists differ at parameter #" +
                                            std::to_string(i) + ": " + reference_label + " has " +
                                            describe(reference[i]) + ", " + other_label + " has " +
                                            describe(other[i])};
    }
  }
  if (reference.size() == other.size()) {
    return std::nullopt;
  }
  const bool reference_longer = reference.size() > other.size();
  const ParameterInfo& extra = reference_longer ? reference[common] : other[common];
  return ParameterListDifference{
      common, "the parameter lists differ at parameter #" + std::to_string(common) + ": " +
                  reference_label + " has " + std::to_string(reference.size()) + " parameters, " +
                  other_label + " has " + std::to_string(other.size()) +
                  "; the first extra one, on " +
                  (reference_longer ? reference_label : other_label) + ", is " + describe(extra)};
}

}  // namespace fsdp
