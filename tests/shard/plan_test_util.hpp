// Shared by the sharding plan tests: small parameter lists and message checks.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/shard/parameter_info.hpp"
#include "fsdp/shard/sharding_plan.hpp"

namespace fsdp {
// For Boost.Test messages.
inline std::ostream& operator<<(std::ostream& out, Placement placement) {
  return out << name_of(placement);
}
}  // namespace fsdp

namespace fsdp::test {

inline ParameterInfo param(std::string name, std::vector<std::int64_t> shape,
                           std::string layer = "", DType dtype = DType::f32,
                           bool always_gather = false) {
  return ParameterInfo{std::move(name), std::move(shape), dtype, std::move(layer), always_gather};
}

// A predicate for BOOST_CHECK_EXCEPTION: the message contains every fragment.
struct MessageHas {
  std::vector<std::string> fragments;
  bool operator()(const Error& error) const {
    const std::string message = error.what();
    for (const std::string& fragment : fragments) {
      if (message.find(fragment) == std::string::npos) {
        BOOST_TEST_MESSAGE("message '" << message << "' lacks '" << fragment << "'");
        return false;
      }
    }
    return true;
  }
};

// A small model: uneven sizes, several dtypes, one always-gathered parameter, three layers.
inline std::vector<ParameterInfo> small_model() {
  return {param("emb", {11, 3}, "embed", DType::f32, true),
          param("l0.w", {7, 5}, "l0", DType::f32),
          param("l0.b", {7}, "l0", DType::f32),
          param("l1.w", {5, 5}, "l1", DType::bf16),
          param("l1.b", {5}, "l1", DType::f16),
          param("head.w", {3, 7}, "head", DType::f64),
          param("scale", {}, "head", DType::f32)};
}

}  // namespace fsdp::test
