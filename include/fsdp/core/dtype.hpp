// Element types of parameters and buffers, with their sizes; nothing in fsdp assumes 4 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace fsdp {

// 16-bit floating-point storage types. fsdp moves and reduces them; it does not do arithmetic on
// them in user code, so they are plain bit containers with conversions to and from float.
struct bfloat16 {
  std::uint16_t bits = 0;
};
struct float16 {
  std::uint16_t bits = 0;
};

// bfloat16: the upper half of an IEEE binary32, rounded to nearest even; NaN stays NaN.
bfloat16 to_bfloat16(float value);
float to_float(bfloat16 value);
// float16: IEEE binary16, rounded to nearest even, with subnormals, infinities and NaN.
float16 to_float16(float value);
float to_float(float16 value);

enum class DType : std::uint8_t { f32, f64, bf16, f16, i32, i64 };

// Bytes per element.
std::size_t size_of(DType dtype);
// "fp32", "fp64", "bf16", "fp16", "int32", "int64".
const char* name_of(DType dtype);
// Parses the names above (and "float32", "float", "float64", "double", "bfloat16", "float16",
// "half"); throws Error listing the accepted names otherwise.
DType parse_dtype(const std::string& name);
bool is_floating(DType dtype);
// bf16 or fp16: the 16-bit storage types of mixed precision.
bool is_16_bit(DType dtype);

// The DType of a C++ element type, at compile time.
template <class T>
constexpr DType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return DType::f32;
  } else if constexpr (std::is_same_v<U, double>) {
    return DType::f64;
  } else if constexpr (std::is_same_v<U, bfloat16>) {
    return DType::bf16;
  } else if constexpr (std::is_same_v<U, float16>) {
    return DType::f16;
  } else if constexpr (std::is_same_v<U, std::int32_t>) {
    return DType::i32;
  } else if constexpr (std::is_same_v<U, std::int64_t>) {
    return DType::i64;
  } else {
    static_assert(sizeof(U) == 0,
                  "fsdp: unsupported element type; use float, double, fsdp::bfloat16, "
                  "fsdp::float16, std::int32_t or std::int64_t");
    return DType::f32;
  }
}

}  // namespace fsdp
