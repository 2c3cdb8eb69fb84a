#include "fsdp/core/dtype.hpp"
#include "fsdp/core/half_conversion.hpp"

#include <cmath>
#include <cstring>

#include "fsdp/core/error.hpp"

namespace fsdp {
bfloat16 to_bfloat16(float value) {
  return bfloat16{half::bfloat16_bits(value)};
}

float to_float(bfloat16 value) {
  return half::from_bfloat16_bits(value.bits);
}

float16 to_float16(float value) {
  return float16{half::float16_bits(value)};
}

float to_float(float16 value) {
  return half::from_float16_bits(value.bits);
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
