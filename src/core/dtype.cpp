#include "fsdp/core/dtype.hpp"
#include "fsdp/core/half_conversion.hpp"

#include <cmath>
#include <cstring>

#include "fsdp/core/enum_names.hpp"
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

namespace {

const EnumNames<DType>& dtype_names() {
  static const EnumNames<DType> names("dtype",
                                      {{DType::f32, "fp32"},
                                       {DType::f64, "fp64"},
                                       {DType::bf16, "bf16"},
                                       {DType::f16, "fp16"},
                                       {DType::i32, "int32"},
                                       {DType::i64, "int64"}},
                                      {{"float32", DType::f32},
                                       {"float", DType::f32},
                                       {"float64", DType::f64},
                                       {"double", DType::f64},
                                       {"bfloat16", DType::bf16},
                                       {"float16", DType::f16},
                                       {"half", DType::f16}});
  return names;
}

}  // namespace

const char* name_of(DType dtype) {
  return dtype_names().name_of(dtype);
}

DType parse_dtype(const std::string& name) {
  return dtype_names().parse(name);
}

bool is_floating(DType dtype) {
  return dtype != DType::i32 && dtype != DType::i64;
}

bool is_16_bit(DType dtype) {
  return dtype == DType::bf16 || dtype == DType::f16;
}

}  // namespace fsdp
