#include "fsdp/core/dtype.hpp"

#include <cmath>
#include <cstring>

#include "fsdp/core/error.hpp"

namespace fsdp {
namespace {

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

bfloat16 to_bfloat16(float value) {
  std::uint32_t bits = bits_of(value);
  if (std::isnan(value)) {
    return bfloat16{static_cast<std::uint16_t>((bits >> 16) | 0x0040u)};  // quiet NaN
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return bfloat16{static_cast<std::uint16_t>((bits + rounding) >> 16)};
}

float to_float(bfloat16 value) {
  return float_of(static_cast<std::uint32_t>(value.bits) << 16);
}

float16 to_float16(float value) {
  const std::uint32_t bits = bits_of(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // infinity or NaN
    const bool nan = abs_bits > 0x7f800000u;
    return float16{static_cast<std::uint16_t>(sign | 0x7c00u | (nan ? 0x0200u : 0u))};
  }
  if (abs_bits >= 0x477ff000u) {  // rounds to a value above the largest half (65504)
    return float16{static_cast<std::uint16_t>(sign | 0x7c00u)};
  }
  const int exponent = static_cast<int>(abs_bits >> 23) - 127;
  if (exponent >= -14) {  // normal half
    std::uint32_t mantissa = abs_bits & 0x7fffffu;
    std::uint32_t half = (static_cast<std::uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    const std::uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) {
      ++half;  // a carry into the exponent is the correct rounding
    }
    return float16{static_cast<std::uint16_t>(sign | half)};
  }
  if (exponent < -25) {  // below half the smallest subnormal: rounds to zero
    return float16{sign};
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
  return float16{static_cast<std::uint16_t>(sign | half)};
}

float to_float(float16 value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (value.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1fu) {
    return float_of(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::bf16:
    case DType::f16:
      return 2;
  }
  throw Error("invalid DType value " + std::to_string(static_cast<int>(dtype)));
}

const char* name_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "fp32";
    case DType::f64:
      return "fp64";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "fp16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
  }
  return "invalid";
}

DType parse_dtype(const std::string& name) {
  struct Alias {
    const char* name;
    DType dtype;
  };
  static const Alias aliases[] = {
      {"fp32", DType::f32},    {"float32", DType::f32},   {"float", DType::f32},
      {"fp64", DType::f64},    {"float64", DType::f64},   {"double", DType::f64},
      {"bf16", DType::bf16},   {"bfloat16", DType::bf16}, {"fp16", DType::f16},
      {"float16", DType::f16}, {"half", DType::f16},      {"int32", DType::i32},
      {"int64", DType::i64},
  };
  for (const Alias& alias : aliases) {
    if (name == alias.name) {
      return alias.dtype;
    }
  }
  throw Error("unknown dtype '" + name +
              "'; expected one of fp32, fp64, bf16, fp16, int32, int64 (or float32, float, "
              "float64, double, bfloat16, float16, half)");
}

bool is_floating(DType dtype) {
  return dtype != DType::i32 && dtype != DType::i64;
}

}  // namespace fsdp
