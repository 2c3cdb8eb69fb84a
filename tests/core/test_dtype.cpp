#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "fsdp/core/dtype.hpp"
#include "fsdp/core/error.hpp"

using namespace fsdp;

BOOST_AUTO_TEST_CASE(sizes_come_from_the_dtype) {
  BOOST_TEST(size_of(DType::f32) == 4u);
  BOOST_TEST(size_of(DType::f64) == 8u);
  BOOST_TEST(size_of(DType::bf16) == 2u);
  BOOST_TEST(size_of(DType::f16) == 2u);
  BOOST_TEST(size_of(DType::i32) == 4u);
  BOOST_TEST(size_of(DType::i64) == 8u);
  for (const DType dtype :
       {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    BOOST_TEST(is_16_bit(dtype) == (dtype == DType::bf16 || dtype == DType::f16));
  }
  static_assert(dtype_of<const double>() == DType::f64);
  static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);
}

BOOST_AUTO_TEST_CASE(names_parse_back) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    BOOST_TEST((parse_dtype(name_of(d)) == d));
  }
  BOOST_TEST((parse_dtype("half") == DType::f16));
  BOOST_CHECK_EXCEPTION(parse_dtype("fp8"), Error, [](const Error& e) {
    return std::string(e.what()).find("unknown dtype 'fp8'") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(bfloat16_rounds_to_nearest_even) {
  BOOST_TEST(to_float(to_bfloat16(1.0f)) == 1.0f);
  BOOST_TEST(to_float(to_bfloat16(-3.5f)) == -3.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  BOOST_TEST(to_float(to_bfloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  // Just above halfway rounds up.
  BOOST_TEST(to_float(to_bfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -16))) ==
             1.0f + std::ldexp(1.0f, -7));
  BOOST_TEST(std::isnan(to_float(to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  BOOST_TEST(std::isinf(to_float(to_bfloat16(std::numeric_limits<float>::infinity()))));
}

BOOST_AUTO_TEST_CASE(float16_covers_normals_subnormals_and_specials) {
  BOOST_TEST(to_float16(1.0f).bits == 0x3c00);
  BOOST_TEST(to_float16(-2.0f).bits == 0xc000);
  BOOST_TEST(to_float16(65504.0f).bits == 0x7bff);               // largest half
  BOOST_TEST(to_float16(65520.0f).bits == 0x7c00);               // rounds to infinity
  BOOST_TEST(to_float16(std::ldexp(1.0f, -24)).bits == 0x0001);  // smallest subnormal
  BOOST_TEST(to_float16(std::ldexp(1.0f, -25)).bits == 0x0000);  // tie to even: zero
  BOOST_TEST(to_float16(std::ldexp(1.5f, -25)).bits == 0x0001);
  BOOST_TEST(to_float16(std::ldexp(1.0f, -14)).bits == 0x0400);  // smallest normal
  BOOST_TEST(std::isnan(to_float(to_float16(std::numeric_limits<float>::quiet_NaN()))));
  // Every finite half survives a round trip through float.
  for (unsigned bits = 0; bits < 0x10000u; ++bits) {
    const float16 h{static_cast<std::uint16_t>(bits)};
    if ((bits & 0x7c00u) == 0x7c00u) {
      continue;
    }
    if (to_float16(to_float(h)).bits != h.bits) {
      BOOST_TEST(to_float16(to_float(h)).bits == h.bits,
                 "round trip of half 0x" << std::hex << bits);
      break;
    }
  }
}
