#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dtrain/core/dtype.hpp"
#include "dtrain/core/error.hpp"

using namespace dtrain;

// Independent reference: round a float to a format with `mant` stored mantissa bits and
// exponent range [emin, emax] by exact arithmetic in long double, ties to even.
static double round_reference(double x, int mant, int emin, double max_finite) {
  if (std::isnan(x)) return x;
  double ax = std::fabs(x);
  if (ax == 0) return x;
  int e;
  std::frexp(ax, &e);   // ax = f * 2^e, f in [0.5, 1)
  int exp = e - 1;      // ax in [2^exp, 2^(exp+1))
  if (exp < emin) exp = emin;  // subnormal spacing
  double ulp = std::ldexp(1.0, exp - mant);
  double q = ax / ulp;
  double r = std::nearbyint(q);  // default rounding mode: ties to even
  double y = r * ulp;
  // Overflow: values at or above max + ulp/2 go to infinity (ties go to even = infinity).
  double max_ulp = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(max_finite))) - mant);
  if (ax >= max_finite + max_ulp / 2) y = std::numeric_limits<double>::infinity();
  return std::copysign(y, x);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), Error);
}

TEST(DType, Bf16RoundTripIsExactForRepresentable) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_bits_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16_bits(f), h) << "h=" << h;
  }
}

TEST(DType, F16RoundTripIsExactForRepresentable) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_bits_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16_bits(f), h) << "h=" << h;
  }
}

TEST(DType, RoundingMatchesExactReference) {
  // Sweep float bit patterns with a stride that hits every exponent and many mantissas,
  // including halfway cases (low bits 0x8000 / 0x1000).
  for (std::uint64_t u = 0; u < 0x80000000ull; u += 0x1235) {
    for (std::uint32_t tweak : {0u, 0x8000u, 0x1000u}) {
      std::uint32_t bits = (static_cast<std::uint32_t>(u) & ~0xFFFFu) | tweak | (static_cast<std::uint32_t>(u) & 0x3);
      float f = bits_float(bits);
      if (std::isnan(f) || std::isinf(f)) continue;
      double want_bf = round_reference(f, 7, -126, 3.3895313892515355e38);
      ASSERT_EQ(static_cast<double>(bf16_bits_to_f32(f32_to_bf16_bits(f))), want_bf) << f;
      double want_h = round_reference(f, 10, -14, 65504.0);
      ASSERT_EQ(static_cast<double>(f16_bits_to_f32(f32_to_f16_bits(f))), want_h) << f;
    }
  }
}

TEST(DType, SpecialValues) {
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7C00);  // tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16_bits(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_f16_bits(5.9604644775390625e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(2.98023223876953125e-08f), 0x0000); // half of it: tie to even 0
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16_bits(bits_float(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16_bits(bits_float(0x3F818000u)), 0x3F82);  // tie, odd rounds up
}

TEST(DType, BulkConvert) {
  float src[5] = {1.0f, -2.5f, 3.140625f, 0.0f, 1e-3f};
  std::uint16_t mid[5];
  float back[5];
  convert(src, DType::f32, mid, DType::bf16, 5);
  convert(mid, DType::bf16, back, DType::f32, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back[i], bf16_bits_to_f32(f32_to_bf16_bits(src[i])));
  EXPECT_THROW((convert(src, DType::f32, mid, DType::i32, 5)), Error);
}
