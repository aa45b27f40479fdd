#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <numeric>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/parallel/buckets.hpp"
#include "dtrain/parallel/zero.hpp"

using namespace dtrain;
using parallel::Range;

namespace {
GptConfig small_gpt(int layers) {
  GptConfig cfg;
  cfg.layers = layers;
  cfg.d_model = 16;
  cfg.heads = 2;
  cfg.seq_len = 8;
  cfg.vocab = 20;
  return cfg;
}
}  // namespace

TEST(Buckets, GroupAdjacentRangesUpToTheCap) {
  // Backward order: the end of the arena first.
  const std::vector<Range> ranges = {{90, 100}, {60, 90}, {20, 60}, {0, 20}};
  auto b = parallel::plan_buckets(ranges, 35 * 4);  // a bucket closes once it holds >= 35 floats
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].first, 60u);
  EXPECT_EQ(b[0].last, 100u);
  EXPECT_EQ(b[0].ranges, (std::vector<int>{0, 1}));
  EXPECT_EQ(b[1].first, 20u);
  EXPECT_EQ(b[1].last, 60u);
  EXPECT_EQ(b[2].first, 0u);
  EXPECT_EQ(b[2].last, 20u);
  EXPECT_EQ(parallel::plan_buckets(ranges, 1).size(), 4u);       // one range each
  EXPECT_EQ(parallel::plan_buckets(ranges, 1 << 30).size(), 1u);  // everything
  EXPECT_THROW(parallel::plan_buckets({{0, 10}, {20, 30}}, 4), Error);
}

TEST(Buckets, SplitEvenly) {
  EXPECT_EQ(parallel::split_evenly(10, 3), (std::vector<std::size_t>{4, 3, 3}));
  EXPECT_EQ(parallel::split_evenly(2, 4), (std::vector<std::size_t>{1, 1, 0, 0}));
  EXPECT_EQ(parallel::split_evenly(0, 2), (std::vector<std::size_t>{0, 0}));
  EXPECT_THROW(parallel::split_evenly(5, 0), Error);
}

TEST(Buckets, SplitAlignedGivesWholePagesAndRotatesTheLongerPieces) {
  // 10 units of 4 over 3 parts: 4,3,3 units; the last piece holds the 38 - 36 = 2 leftover.
  EXPECT_EQ(parallel::split_aligned(38, 3, 4), (std::vector<std::size_t>{16, 12, 10}));
  EXPECT_EQ(parallel::split_aligned(38, 3, 4, 1), (std::vector<std::size_t>{12, 16, 10}));
  EXPECT_EQ(parallel::split_aligned(38, 3, 4, 2), (std::vector<std::size_t>{12, 12, 14}));
  EXPECT_EQ(parallel::split_aligned(5, 4, 4), (std::vector<std::size_t>{4, 1, 0, 0}));
  EXPECT_EQ(parallel::split_aligned(0, 2, 4), (std::vector<std::size_t>{0, 0}));
  for (std::size_t n : {1u, 1023u, 1024u, 5000u, 100000u}) {
    for (int parts = 1; parts <= 5; ++parts) {
      for (std::size_t rot = 0; rot < 6; ++rot) {
        const auto s = parallel::split_aligned(n, parts, 1024, rot);
        std::size_t sum = 0, nonzero_partial = 0;
        for (std::size_t x : s) {
          sum += x;
          if (x % 1024 != 0) ++nonzero_partial;
        }
        EXPECT_EQ(sum, n);
        EXPECT_LE(nonzero_partial, 1u);  // only the piece holding the tail is partial
      }
    }
  }
  EXPECT_THROW(parallel::split_aligned(5, 2, 0), Error);
}

TEST(GptGradReadyRanges, TileTheArenaInBackwardOrder) {
  const GptConfig cfg = small_gpt(3);
  GptModel model(cfg, cpu_device(), 1, 1);
  const auto& r = model.grad_ready_ranges();
  ASSERT_EQ(r.size(), 5u);  // head+ln_f, 3 blocks, embeddings
  EXPECT_EQ(r.front().second, model.parameters().numel());
  EXPECT_EQ(r.back().first, 0u);
  for (std::size_t i = 1; i < r.size(); ++i) EXPECT_EQ(r[i].second, r[i - 1].first);
  // The hook reports every range once, in that order.
  std::vector<Range> seen;
  model.set_grad_ready_hook([&](std::size_t a, std::size_t b) { seen.push_back({a, b}); });
  std::vector<std::int32_t> tok(8, 3), tgt(8, 4);
  model.forward(tok.data(), tgt.data(), 1, 8);
  model.backward(1.0f);
  EXPECT_EQ(seen, r);
}

TEST(Zero, OwnedSegmentsPartitionTheParameters) {
  const GptConfig cfg = small_gpt(1);
  GptModel model(cfg, cpu_device(), 1, 1);
  const auto all = parallel::parameter_segments(model.parameters());
  std::size_t psi = 0;
  for (auto& s : all) psi += s.numel;
  const std::size_t n = model.parameters().numel();
  std::size_t covered = 0;
  for (int dp : {1, 2, 3}) {
    covered = 0;
    auto pieces = parallel::split_evenly(n, dp);
    std::size_t start = 0;
    for (int r = 0; r < dp; ++r) {
      for (auto& s : parallel::owned_segments(model.parameters(), {{start, start + pieces[r]}}))
        covered += s.numel;
      start += pieces[r];
    }
    EXPECT_EQ(covered, psi) << "dp " << dp;
  }
}

TEST(AdamW, MatchesTheReferenceFormulaOnCompactState) {
  // Two segments with a gap between them; the gap must stay untouched.
  std::vector<float> p = {1.0f, -2.0f, 0.5f, 9.0f, 3.0f, -1.0f}, g = {0.1f, 0.2f, -0.3f, 7.0f, 0.4f, -0.5f};
  optim::AdamWConfig cfg{0.9f, 0.95f, 1e-8f, 0.1f};
  optim::AdamW opt(cpu_device(), {{0, 3, true}, {4, 2, false}}, 6, cfg);
  EXPECT_EQ(opt.state_bytes(), 2 * 5 * sizeof(float));
  std::vector<double> ref(p.begin(), p.end()), m(6, 0), v(6, 0);
  for (int step = 1; step <= 3; ++step) {
    opt.step(p.data(), g.data(), 0.01f, 0.5f);
    for (int i : {0, 1, 2, 4, 5}) {
      const double gi = 0.5 * g[i];
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.95 * v[i] + 0.05 * gi * gi;
      const double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.95, step));
      const double wd = i < 3 ? 0.1 : 0.0;
      ref[i] -= 0.01 * (mh / (std::sqrt(vh) + 1e-8) + wd * ref[i]);
    }
  }
  for (int i : {0, 1, 2, 4, 5}) EXPECT_NEAR(p[i], ref[i], 1e-6) << i;
  EXPECT_EQ(p[3], 9.0f);
}

// Settings no run uses, a bad lr and missing buffers are refused: the file of such a run is
// refused as damaged, a NaN lr turned every parameter into NaN, a null buffer crashed.
TEST(AdamW, RefusesSettingsAndStepArgumentsNoRunUses) {
  const auto code = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return Errc::internal;  // taken
  };
  for (optim::AdamWConfig bad : {optim::AdamWConfig{-0.5f, 0.95f, 1e-8f, 0.1f}, optim::AdamWConfig{0.9f, 1.0f, 1e-8f, 0.1f},
                                 optim::AdamWConfig{0.9f, 0.95f, 0.0f, 0.1f}, optim::AdamWConfig{0.9f, 0.95f, 1e-8f, -1.0f},
                                 optim::AdamWConfig{0.9f, 0.95f, 1e-8f, std::nanf("")}}) {
    EXPECT_EQ(code([&] { optim::AdamW(cpu_device(), {{0, 1, true}}, 1, bad); }), Errc::invalid_argument)
        << bad.beta1 << " " << bad.beta2 << " " << bad.eps << " " << bad.weight_decay;
  }
  std::vector<float> p = {1.0f}, g = {0.5f};
  optim::AdamW opt(cpu_device(), {{0, 1, true}}, 1, optim::AdamWConfig{});
  for (float lr : {std::nanf(""), -0.01f, INFINITY})
    EXPECT_EQ(code([&] { opt.step(p.data(), g.data(), lr); }), Errc::invalid_argument) << lr;
  EXPECT_EQ(code([&] { opt.step(nullptr, g.data(), 0.01f); }), Errc::invalid_argument);
  EXPECT_EQ(code([&] { opt.step(p.data(), nullptr, 0.01f); }), Errc::invalid_argument);
  EXPECT_EQ(p[0], 1.0f);
  EXPECT_EQ(opt.steps_taken(), 0);
}

// Past 2^31 steps (a C ABI program's, or a checkpoint's count) the bias corrections are 1:
// the update is lr * g / (|g| + eps), as at step INT_MAX, not 0 (a step wrapped to a
// negative int made every update 0).
TEST(AdamW, StepsPastIntMaxUpdateAsAtIntMax) {
  optim::AdamWConfig cfg{0.9f, 0.999f, 1e-8f, 0.0f};
  for (long taken : {long{INT_MAX} - 1, long{INT_MAX}, long{INT_MAX} + 1, 1L << 40}) {
    std::vector<float> p = {1.0f}, g = {0.5f};
    optim::AdamW opt(cpu_device(), {{0, 1, false}}, 1, cfg);
    opt.set_steps_taken(taken);
    opt.step(p.data(), g.data(), 0.01f, 1.0f);
    // m = 0.1 g, v = 0.001 g^2, corrections 1: p - lr * 0.1 g / (sqrt(0.001) g + eps).
    const double expected = 1.0 - 0.01 * (0.1 * 0.5) / (std::sqrt(0.001) * 0.5 + 1e-8);
    EXPECT_NEAR(p[0], expected, 1e-6) << "after " << taken << " steps";
    EXPECT_EQ(opt.steps_taken(), taken + 1);
  }
}
