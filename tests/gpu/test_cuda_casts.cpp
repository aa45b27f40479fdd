// The CUDA device's 16-bit casts and non-finite check against the CPU device's, bit for bit
// (both round with device/half_bits.hpp; tests/unit/test_half_casts.cpp checks the CPU
// against an independent reference).
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>

#include "gpu_test.hpp"

namespace {

using dtrain::DType;
using gputest::OnDevice;

std::vector<float> cast_inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 1e10f,
                          1.00048828125f, 1.00146484375f, 1.00390625f, 1.01171875f,
                          5.9604644775390625e-08f, 2.98023223876953125e-08f,
                          8.94069671630859375e-08f, 6.103515625e-05f, 1e-45f, 1e-40f,
                          3.4028234e38f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 gen(11);
  for (int i = 0; i < 1 << 20; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(gen());
    float f;
    std::memcpy(&f, &u, sizeof f);
    v.push_back(f);
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaCasts : public ::testing::TestWithParam<DType> {
 protected:
  dtrain::Device& cpu = dtrain::cpu_device();
  dtrain::Device& gpu = dtrain::select_device("cuda");
};

TEST_P(CudaCasts, RoundingAndEncodingsMatchTheCpuBitForBit) {
  const DType fmt = GetParam();
  const std::vector<float> x = cast_inputs();
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> want(x.size()), want_back(x.size());
  std::vector<std::uint16_t> want_bits(x.size());
  cpu.round_to_16bit(want.data(), x.data(), n, fmt);
  cpu.convert_to_16bit(want_bits.data(), x.data(), n, fmt);
  cpu.convert_from_16bit(want_back.data(), want_bits.data(), n, fmt);

  OnDevice<float> in(gpu, x), rounded(gpu, x.size()), back(gpu, x.size());
  OnDevice<std::uint16_t> bits(gpu, x.size());
  gpu.round_to_16bit(rounded.get(), in.get(), n, fmt);
  gpu.convert_to_16bit(bits.get(), in.get(), n, fmt);
  gpu.convert_from_16bit(back.get(), bits.get(), n, fmt);
  EXPECT_TRUE(same_bits(rounded.host(), want)) << "round_to_16bit";
  EXPECT_TRUE(bits.host() == want_bits) << "convert_to_16bit";
  EXPECT_TRUE(same_bits(back.host(), want_back)) << "convert_from_16bit";
  // Conversions start at an element (four floats or halves at a time where both pointers are
  // aligned for it, one at a time elsewhere and for the last n % 4).
  for (const std::int64_t first : {1, 2, 4, 5}) {
    OnDevice<std::uint16_t> part_bits(gpu, x.size());
    OnDevice<float> part_back(gpu, x.size());
    gpu.convert_to_16bit(part_bits.get() + first, in.get() + first, n - first, fmt);
    gpu.convert_from_16bit(part_back.get() + first, part_bits.get() + first, n - first, fmt);
    const std::vector<std::uint16_t> got_bits = part_bits.host();
    const std::vector<float> got_back = part_back.host();
    EXPECT_TRUE(std::equal(got_bits.begin() + first, got_bits.end(), want_bits.begin() + first))
        << "convert_to_16bit from element " << first;
    EXPECT_EQ(std::memcmp(got_back.data() + first, want_back.data() + first,
                          (x.size() - first) * sizeof(float)), 0)
        << "convert_from_16bit from element " << first;
  }
  gpu.round_to_16bit(in.get(), in.get(), n, fmt);  // in place
  EXPECT_TRUE(same_bits(in.host(), want)) << "round_to_16bit in place";
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaCasts, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtrain::dtype_name(info.param)); });

TEST(CudaNonFinite, FindsInfAndNanAnywhere) {
  dtrain::Device& gpu = dtrain::select_device("cuda");
  std::vector<float> x = gputest::random_floats(1000003, 5, -1e30f, 1e30f);
  const auto n = static_cast<std::int64_t>(x.size());
  OnDevice<float> d(gpu, x);
  EXPECT_FALSE(gpu.any_nonfinite(d.get(), n));
  EXPECT_FALSE(gpu.any_nonfinite(d.get(), 0));
  for (std::size_t pos : {std::size_t{0}, std::size_t{777777}, x.size() - 1}) {
    for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> y = x;
      y[pos] = bad;
      OnDevice<float> dy(gpu, y);
      EXPECT_TRUE(gpu.any_nonfinite(dy.get(), n)) << pos;
      EXPECT_FALSE(gpu.any_nonfinite(dy.get(), static_cast<std::int64_t>(pos))) << pos;
    }
  }
}

}  // namespace
