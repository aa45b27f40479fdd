// optim::LossScaler: the pure skip / back-off / growth logic of fp16 loss scaling.
#include <gtest/gtest.h>

#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/optim/loss_scaler.hpp"

namespace {

using dtrain::optim::LossScaler;
using dtrain::optim::LossScalerConfig;

LossScalerConfig small(double initial, long interval) {
  LossScalerConfig c;
  c.initial_scale = initial;
  c.growth_interval = interval;
  return c;
}

TEST(LossScaler, DefaultsAreTheUsualOnes) {
  LossScaler s{LossScalerConfig{}};
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inverse_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.config().growth_interval, 2000);
  EXPECT_EQ(s.config().backoff, 0.5);
  EXPECT_EQ(s.config().growth, 2.0);
  EXPECT_EQ(s.config().min_scale, 1.0);
}

TEST(LossScaler, DisabledNeverScalesOrSkips) {
  LossScaler s;
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0f);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(s.update(true));  // bf16: no skipping
  s.set_scale(1024);
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScaler, OverflowSkipsAndHalves) {
  LossScaler s{small(1024, 3)};
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 256.0f);
}

TEST(LossScaler, GrowsAfterTheIntervalOfCleanStepsInARow) {
  LossScaler s{small(8, 3)};
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16.0f);  // the third clean step in a row
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));  // an overflow restarts the count
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16.0f);
}

TEST(LossScaler, GrowthStopsAtTheMaximum) {
  LossScalerConfig c = small(4, 1);
  c.max_scale = 16;
  LossScaler s{c};
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16.0f);
}

TEST(LossScaler, OverflowAtTheMinimumIsAnErrorNotAnEndlessSkip) {
  LossScalerConfig c = small(4, 10);
  c.min_scale = 1;
  LossScaler s{c};
  EXPECT_FALSE(s.update(true));  // 4 -> 2
  EXPECT_FALSE(s.update(true));  // 2 -> 1
  EXPECT_EQ(s.scale(), 1.0f);
  try {
    s.update(true);
    FAIL() << "an overflow at the minimum scale must throw";
  } catch (const dtrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("minimum loss scale"), std::string::npos) << e.what();
  }
  // from any start the error comes after at most log2(initial / min) skips
  LossScalerConfig wide = small(1 << 30, 10);
  wide.max_scale = 1 << 30;
  LossScaler big{wide};
  int skips = 0;
  EXPECT_THROW(
      for (;;) {
        big.update(true);
        ASSERT_LE(++skips, 30);
      },
      dtrain::Error);
  EXPECT_EQ(skips, 30);
}

TEST(LossScaler, BackoffStopsAtTheMinimum) {
  LossScalerConfig c = small(3, 10);
  c.min_scale = 2;
  LossScaler s{c};
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 2.0f);  // 1.5 clamped to the minimum
  EXPECT_THROW(s.update(true), dtrain::Error);
}

TEST(LossScaler, InconsistentConfigurationsAreRefused) {
  auto bad = [](auto tweak) {
    LossScalerConfig c;
    tweak(c);
    EXPECT_THROW(LossScaler{c}, dtrain::Error);
  };
  bad([](LossScalerConfig& c) { c.min_scale = 0; });
  bad([](LossScalerConfig& c) { c.initial_scale = 0.5; });
  bad([](LossScalerConfig& c) { c.initial_scale = 1e30; });
  bad([](LossScalerConfig& c) { c.backoff = 1; });
  bad([](LossScalerConfig& c) { c.growth = 0.5; });
  bad([](LossScalerConfig& c) { c.growth_interval = 0; });
}

TEST(LossScaler, SetScaleKeepsARestoredScaleAboveTheCeilingAndRestartsTheCount) {
  LossScaler s{small(8, 2)};
  EXPECT_TRUE(s.update(false));
  // A scale saved by a run whose --loss-scale was above 2^24: restored as it was, and it
  // is the new ceiling (growth stops there, as in that run).
  s.set_scale(1e30);
  EXPECT_EQ(s.scale(), 1e30f);
  EXPECT_EQ(s.clean_steps_in_a_row(), 0);
  EXPECT_EQ(s.config().max_scale, 1e30);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 1e30f);
  s.set_scale(0.25);
  EXPECT_EQ(s.scale(), 1.0f);
  // The ceiling comes from the configuration at each restore, not from an earlier one: a
  // scale within it (a file of another run, or none: the initial scale) restores 2^24.
  s.set_scale(8);
  EXPECT_EQ(s.config().max_scale, LossScalerConfig{}.max_scale);
  for (int i = 0; i < 200; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), static_cast<float>(LossScalerConfig{}.max_scale));
}

}  // namespace
