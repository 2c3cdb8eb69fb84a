// Conversions between float and the 16-bit storage types (bfloat16, float16), callable on the host
// and inside Kokkos kernels: round to nearest even, NaN stays NaN (quiet), overflow to infinity,
// float16 subnormals. The one home of these rules: fsdp::to_bfloat16 and friends (dtype.hpp)
// forward here.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "fsdp/core/dtype.hpp"

namespace fsdp::half {

KOKKOS_INLINE_FUNCTION std::uint32_t bits_of(float value) {
  std::uint32_t bits = 0;
  __builtin_memcpy(&bits, &value, sizeof bits);  // a bit cast that also compiles for devices
  return bits;
}

KOKKOS_INLINE_FUNCTION float float_of(std::uint32_t bits) {
  float value = 0;
  __builtin_memcpy(&value, &bits, sizeof value);
  return value;
}

// bfloat16: the upper half of an IEEE binary32, rounded to nearest even.
KOKKOS_INLINE_FUNCTION std::uint16_t bfloat16_bits(float value) {
  const std::uint32_t bits = bits_of(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

KOKKOS_INLINE_FUNCTION float from_bfloat16_bits(std::uint16_t bits) {
  return float_of(static_cast<std::uint32_t>(bits) << 16);
}

// float16: IEEE binary16, rounded to nearest even, with subnormals, infinities and NaN.
KOKKOS_INLINE_FUNCTION std::uint16_t float16_bits(float value) {
  const std::uint32_t bits = bits_of(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // infinity or NaN
    const bool nan = abs_bits > 0x7f800000u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | (nan ? 0x0200u : 0u));
  }
  if (abs_bits >= 0x477ff000u) {  // rounds to a value above the largest half (65504)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  const int exponent = static_cast<int>(abs_bits >> 23) - 127;
  if (exponent >= -14) {  // normal half
    const std::uint32_t mantissa = abs_bits & 0x7fffffu;
    std::uint32_t half = (static_cast<std::uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    const std::uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) {
      ++half;  // a carry into the exponent is the correct rounding
    }
    return static_cast<std::uint16_t>(sign | half);
  }
  if (exponent < -25) {  // below half the smallest subnormal: rounds to zero
    return sign;
  }
  // Subnormal half: value = m * 2^-24 with m < 1024.
  const std::uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  const int shift = -exponent - 14 + 13;  // from 23 fraction bits to the subnormal position
  std::uint32_t half = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) {
    ++half;
  }
  return static_cast<std::uint16_t>(sign | half);
}

KOKKOS_INLINE_FUNCTION float from_float16_bits(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) {
    return float_of(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24, exact
    return sign ? -magnitude : magnitude;
  }
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// The storage type's conversions by type, for kernels templated on it.
KOKKOS_INLINE_FUNCTION bfloat16 narrow(float value, bfloat16) {
  return bfloat16{bfloat16_bits(value)};
}
KOKKOS_INLINE_FUNCTION float16 narrow(float value, float16) {
  return float16{float16_bits(value)};
}
KOKKOS_INLINE_FUNCTION float widen(bfloat16 value) {
  return from_bfloat16_bits(value.bits);
}
KOKKOS_INLINE_FUNCTION float widen(float16 value) {
  return from_float16_bits(value.bits);
}

}  // namespace fsdp::half
