// parallel::PackedParameters: the arena's units live as 16-bit words between their uses and
// come back exactly; the arena holds a unit only while it is held; HeldParameters nests.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/parallel/packed_parameters.hpp"

namespace {

using dtrain::DType;
using dtrain::parallel::HeldParameters;
using dtrain::parallel::PackedParameters;
using dtrain::parallel::Range;

constexpr std::size_t kNumel = 3000;
const std::vector<Range> kUnits = {{2000, 3000}, {500, 2000}, {0, 500}};  // backward's order

// Exact bf16 values (a few mantissa bits, both signs), as the rounded masters are.
std::vector<float> bf16_values() {
  std::vector<float> v(kNumel);
  for (std::size_t i = 0; i < kNumel; ++i)
    v[i] = static_cast<float>(static_cast<int>(i % 97) - 48) * 0.015625f;
  return v;
}

struct Arena {
  dtrain::Device& dev = dtrain::cpu_device();
  dtrain::DeviceBuffer buf{dev, sizeof(float) * kNumel};
  float* data() { return buf.as<float>(); }
  bool unit_is(const Range& u, const std::vector<float>& want) {
    for (std::size_t i = u.first; i < u.second; ++i)
      if (data()[i] != want[i]) return false;
    return true;
  }
  bool unit_is_zero(const Range& u) {
    for (std::size_t i = u.first; i < u.second; ++i)
      if (data()[i] != 0.0f) return false;
    return true;
  }
};

TEST(PackedParameters, UnitsAreWidenedWhileHeldAndDiscardedAfter) {
  Arena a;
  const std::vector<float> values = bf16_values();
  std::copy(values.begin(), values.end(), a.data());
  PackedParameters packed(a.dev, a.data(), kNumel, kUnits, DType::bf16);
  EXPECT_EQ(packed.bytes(), sizeof(std::uint16_t) * kNumel);
  for (const Range& u : kUnits) EXPECT_TRUE(a.unit_is_zero(u)) << "packing discards the arena";

  packed.acquire(1, 2);
  packed.acquire(1, -1);  // nested, as the tied head holds the embedding
  EXPECT_TRUE(a.unit_is(kUnits[1], values));
  EXPECT_TRUE(a.unit_is_zero(kUnits[0]));
  EXPECT_EQ(packed.held_numel(), 1500u);
  packed.release(1);
  EXPECT_TRUE(a.unit_is(kUnits[1], values)) << "still held once";
  packed.acquire(2, -1);
  EXPECT_EQ(packed.peak_numel(), 2000u);
  packed.release(1);
  packed.release(2);
  EXPECT_TRUE(a.unit_is_zero(kUnits[1]));
  EXPECT_EQ(packed.held_numel(), 0u);
  EXPECT_THROW(packed.release(0), dtrain::Error) << "released but not held";
  EXPECT_THROW(packed.acquire(3, -1), dtrain::Error) << "no such unit";
}

TEST(PackedParameters, UpdatedWordsAreWhatTheNextAcquireSees) {
  Arena a;
  std::vector<float> values = bf16_values();
  std::copy(values.begin(), values.end(), a.data());
  PackedParameters packed(a.dev, a.data(), kNumel, kUnits, DType::f16);
  for (float& v : values) v *= -2.0f;  // still exact fp16 values
  a.dev.convert_to_16bit(packed.words(), values.data(), kNumel, DType::f16);
  packed.acquire(0, -1);
  EXPECT_TRUE(a.unit_is(kUnits[0], values));
  packed.release(0);
}

TEST(PackedParameters, HeldScopesNestAndDoNotCountAsThePeakOfAPass) {
  Arena a;
  const std::vector<float> values = bf16_values();
  std::copy(values.begin(), values.end(), a.data());
  PackedParameters packed(a.dev, a.data(), kNumel, kUnits, DType::bf16);
  packed.acquire(2, -1);
  packed.release(2);
  {
    HeldParameters outer(&packed);
    EXPECT_TRUE(packed.held_whole());
    {
      HeldParameters inner(&packed);
    }
    EXPECT_TRUE(packed.held_whole());
    for (const Range& u : kUnits) EXPECT_TRUE(a.unit_is(u, values)) << "the inner scope let go";
  }
  EXPECT_FALSE(packed.held_whole());
  for (const Range& u : kUnits) EXPECT_TRUE(a.unit_is_zero(u));
  EXPECT_EQ(packed.peak_numel(), 500u);
}

TEST(PackedParameters, UnitsMustTileTheArena) {
  Arena a;
  EXPECT_THROW(PackedParameters(a.dev, a.data(), kNumel, {{0, 500}, {600, 3000}}, DType::bf16),
               dtrain::Error);
  EXPECT_THROW(PackedParameters(a.dev, a.data(), kNumel, {{0, 500}, {500, 2000}}, DType::bf16),
               dtrain::Error);
  EXPECT_THROW(PackedParameters(a.dev, a.data(), kNumel, kUnits, DType::f32), dtrain::Error);
}

}  // namespace
