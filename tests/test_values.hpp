// Values that every rank can compute for any rank, exactly representable in every dtype, so that
// collective results are checked for equality, not with a tolerance.
#pragma once

#include <cstdint>

#include "fsdp/core/dtype.hpp"

namespace fsdp::test {

template <class T>
T make(double value) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return to_bfloat16(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, float16>) {
    return to_float16(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

template <class T>
double as_double(T value) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
    return static_cast<double>(to_float(value));
  } else {
    return static_cast<double>(value);
  }
}

// Small integers: sums over 4 ranks stay exact in bf16 (8 significant bits).
inline double value_of(int rank, std::size_t index) {
  return static_cast<double>(rank + static_cast<int>(index % 16));
}

}  // namespace fsdp::test
