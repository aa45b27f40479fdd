// The CPU device's 16-bit casts against an independent reference: rounding computed in double
// from the formats' definitions (precision, minimum exponent, largest finite value), plus the
// scalar conversions of core/dtype as a second opinion on every encoding.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dtrain/core/dtype.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"

namespace {

using dtrain::DType;

struct Format {
  DType type;
  int precision;       // significand bits, the implicit one included
  int min_exponent;    // of the smallest normal number
  double max_finite;
};
const Format kBf16{DType::bf16, 8, -126, (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127)};
const Format kF16{DType::f16, 11, -14, 65504.0};

// Round to nearest, ties to even, by scaling to an integer number of quanta in double
// (exact: every fp32 value and every scaled value is a double).
float reference_round(float x, const Format& f) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  const double a = std::fabs(static_cast<double>(x));
  int exp2;
  std::frexp(a, &exp2);  // a = m * 2^exp2, m in [0.5, 1)
  const int e = std::max(exp2 - 1, f.min_exponent);
  const double quantum = std::ldexp(1.0, e - (f.precision - 1));
  const double r = std::nearbyint(a / quantum) * quantum;  // FE_TONEAREST: ties to even
  const double v = r > f.max_finite ? std::numeric_limits<double>::infinity() : r;
  return static_cast<float>(std::signbit(x) ? -v : v);
}

bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;  // also tells -0 from +0
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::vector<float> edge_cases() {
  std::vector<float> v;
  const float inf = std::numeric_limits<float>::infinity();
  for (double x : {0.0, 1.0, 65504.0, 65505.0, 65519.0, 65519.99, 65520.0, 65536.0, 1e10,
                   // bf16 ties (1 + half a bf16 ulp) and f16 ties (1 + half an f16 ulp)
                   1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8),
                   1.0 + std::ldexp(1.0, -11), 1.0 + 3 * std::ldexp(1.0, -11),
                   1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20),
                   // f16 subnormals: quantum 2^-24, ties between quanta, the normal boundary
                   std::ldexp(1.0, -24), std::ldexp(1.0, -25), 3 * std::ldexp(1.0, -25),
                   5 * std::ldexp(1.0, -25), std::ldexp(1.0, -26), std::ldexp(1.0, -14),
                   std::ldexp(1.0, -14) - std::ldexp(1.0, -25), std::ldexp(1.0, -14) - std::ldexp(1.0, -30),
                   std::ldexp(1023.5, -24),
                   // fp32 subnormals (bf16 keeps them) and fp32's extremes
                   1e-45, 1e-40, std::ldexp(1.0, -126), 3.4028234663852886e38, 1e38}) {
    v.push_back(static_cast<float>(x));
    v.push_back(static_cast<float>(-x));
  }
  // the bf16 overflow midpoint: the largest finite bf16 plus half its ulp rounds to inf
  v.push_back(static_cast<float>(kBf16.max_finite));
  v.push_back(from_bits(0x7F7F8000u));
  v.push_back(from_bits(0x7F7F7FFFu));
  for (float x : {inf, -inf, std::numeric_limits<float>::quiet_NaN(), from_bits(0x7F800001u),
                  from_bits(0xFF812345u), from_bits(0x7FFFFFFFu)})
    v.push_back(x);
  return v;
}

// Edge cases, then random bit patterns over every exponent.
std::vector<float> test_values() {
  std::vector<float> v = edge_cases();
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i) v.push_back(from_bits(static_cast<std::uint32_t>(gen())));
  return v;
}

class HalfCasts : public ::testing::TestWithParam<Format> {
 protected:
  dtrain::Device& dev = dtrain::cpu_device();
};

TEST_P(HalfCasts, RoundingMatchesTheReference) {
  const Format f = GetParam();
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  const std::vector<float> x = test_values();
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> rounded(x.size());
  dev.round_to_16bit(rounded.data(), x.data(), n, f.type);
  int bad = 0;
  for (std::size_t i = 0; i < x.size() && bad < 10; ++i) {
    const float want = reference_round(x[i], f);
    if (!same(rounded[i], want)) {
      ++bad;
      ADD_FAILURE() << dtrain::dtype_name(f.type) << ": round(" << x[i] << " = 0x" << std::hex
                    << dtrain::float_bits(x[i]) << ") gave 0x" << dtrain::float_bits(rounded[i])
                    << ", want 0x" << dtrain::float_bits(want);
    }
  }
  // in place gives the same
  std::vector<float> in_place = x;
  dev.round_to_16bit(in_place.data(), in_place.data(), n, f.type);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(in_place[i], rounded[i])) << i;
}

TEST_P(HalfCasts, EncodingsRoundTripAndMatchTheScalarConversions) {
  const Format f = GetParam();
  const std::vector<float> x = test_values();
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<std::uint16_t> bits(x.size());
  std::vector<float> back(x.size());
  dev.convert_to_16bit(bits.data(), x.data(), n, f.type);
  dev.convert_from_16bit(back.data(), bits.data(), n, f.type);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(same(back[i], reference_round(x[i], f))) << "value " << x[i];
    const std::uint16_t scalar = f.type == DType::bf16 ? dtrain::f32_to_bf16_bits(x[i])
                                                       : dtrain::f32_to_f16_bits(x[i]);
    ASSERT_EQ(bits[i], scalar) << "value " << x[i];
  }
}

TEST_P(HalfCasts, EveryEncodingDecodesExactly) {
  const Format f = GetParam();
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> got(all.size());
  dev.convert_from_16bit(got.data(), all.data(), 65536, f.type);
  const int mant = f.precision - 1;
  const int bias = 1 - f.min_exponent;
  const int exp_bits = 15 - mant;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    // the IEEE definition: (-1)^s * 2^(e - bias) * 1.m, or 2^(1 - bias) * 0.m when e == 0
    const int e = static_cast<int>((h >> mant) & ((1u << exp_bits) - 1));
    const std::uint32_t m = h & ((1u << mant) - 1);
    double want;
    if (e == (1 << exp_bits) - 1) {
      want = m ? std::nan("") : std::numeric_limits<double>::infinity();
    } else if (e == 0) {
      want = std::ldexp(static_cast<double>(m), 1 - bias - mant);
    } else {
      want = std::ldexp(static_cast<double>(m + (1u << mant)), e - bias - mant);
    }
    if (h & 0x8000u) want = -want;
    ASSERT_TRUE(same(got[h], static_cast<float>(want))) << "encoding 0x" << std::hex << h;
  }
}

TEST_P(HalfCasts, OverflowAndSpecialValues) {
  const Format f = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, inf,
                          std::numeric_limits<float>::quiet_NaN(), -0.0f};
  std::vector<float> r(x.size());
  dev.round_to_16bit(r.data(), x.data(), static_cast<std::int64_t>(x.size()), f.type);
  if (f.type == DType::f16) {
    EXPECT_EQ(r[0], 65504.0f);
    EXPECT_EQ(r[1], 65504.0f);
    EXPECT_EQ(r[2], inf);   // the midpoint past the largest finite f16 rounds to inf
    EXPECT_EQ(r[3], inf);
    EXPECT_EQ(r[4], -inf);
  } else {
    EXPECT_EQ(r[0], 65536.0f);  // bf16 keeps 8 significant bits, and fp32's range
    EXPECT_EQ(r[3], 999424.0f);
  }
  EXPECT_EQ(r[5], inf);
  EXPECT_TRUE(std::isnan(r[6]));
  EXPECT_TRUE(std::signbit(r[7]) && r[7] == 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfCasts, ::testing::Values(kBf16, kF16),
                         [](const auto& info) { return std::string(dtrain::dtype_name(info.param.type)); });

TEST(HalfCastsFormat, OtherTypesAreRefused) {
  float x = 1.0f;
  std::uint16_t h = 0;
  dtrain::Device& dev = dtrain::cpu_device();
  EXPECT_THROW(dev.round_to_16bit(&x, &x, 1, DType::f32), dtrain::Error);
  EXPECT_THROW(dev.convert_to_16bit(&h, &x, 1, DType::i32), dtrain::Error);
  EXPECT_THROW(dev.convert_from_16bit(&x, &h, 1, DType::f64), dtrain::Error);
}

// The CPU keeps fp32 GEMM operands under mixed precision, but takes the same formats.
TEST(HalfCastsFormat, GemmOperandFormats) {
  dtrain::Device& dev = dtrain::cpu_device();
  for (DType fmt : {DType::bf16, DType::f16, DType::f32}) {
    EXPECT_NO_THROW(dev.set_gemm_operand_format(fmt)) << dtrain::dtype_name(fmt);
  }
  EXPECT_THROW(dev.set_gemm_operand_format(DType::i32), dtrain::Error);
  EXPECT_THROW(dev.set_gemm_operand_format(DType::f64), dtrain::Error);
}

TEST(NonFinite, FindsInfAndNanAnywhere) {
  dtrain::Device& dev = dtrain::cpu_device();
  std::vector<float> x(10007);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1e30f, 1e30f);
  for (float& v : x) v = dist(gen);
  x[17] = std::numeric_limits<float>::max();
  x[18] = -std::numeric_limits<float>::max();
  const auto n = static_cast<std::int64_t>(x.size());
  EXPECT_FALSE(dev.any_nonfinite(x.data(), n));
  EXPECT_FALSE(dev.any_nonfinite(x.data(), 0));
  for (std::size_t pos : {std::size_t{0}, std::size_t{4095}, std::size_t{4096}, x.size() - 1}) {
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      const float keep = x[pos];
      x[pos] = bad;
      EXPECT_TRUE(dev.any_nonfinite(x.data(), n)) << "at " << pos << ": " << bad;
      // a view that ends before the bad element sees nothing
      EXPECT_FALSE(dev.any_nonfinite(x.data(), static_cast<std::int64_t>(pos))) << pos;
      x[pos] = keep;
    }
  }
}

}  // namespace
