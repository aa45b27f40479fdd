// Pipeline parallelism in the Trainer: gpipe, 1f1b and interleaved (2 chunks per rank) at
// PP = 2 and 4, PP x DP, ZeRO-1, PP x TP, DP x TP x PP (8 ranks), reproduce single-rank training on the same global
// batch (clipping active, so the global gradient norm over the stages is checked too),
// --deterministic is bit-identical across data-parallel degrees, and invalid layouts fail on
// every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/train/trainer.hpp"
#include "test_support.hpp"
#include "train_fixtures.hpp"

using namespace dtrain;
using dtrain::test::world;

namespace {

train::TrainConfig tiny_config() {
  train::TrainConfig c = test::tiny_train_config();
  c.layers = 4;
  c.clip_grad = 0.3;  // clipping active: the global norm over the stages matters
  return c;
}

// The loss of every step, their gradient norms, then the validation loss after them
// (pipelined evaluation with --pp > 1).
std::vector<double> train_losses(const train::TrainConfig& cfg, Communicator& comm) {
  train::Trainer t(cfg, comm);
  std::vector<double> norms;
  for (long s = 0; s < cfg.steps; ++s) {
    t.train_step();
    norms.push_back(t.last_grad_norm());
  }
  std::vector<double> values = t.loss_history();
  values.insert(values.end(), norms.begin(), norms.end());
  values.push_back(t.evaluate());
  return values;
}

// What train_losses' value i is.
std::string value_name(std::size_t i, std::size_t count) {
  const std::size_t steps = (count - 1) / 2;
  if (i < steps) return "step " + std::to_string(i + 1);
  if (i < 2 * steps) return "gradient norm of step " + std::to_string(i - steps + 1);
  return "validation";
}

std::vector<double> single_rank_losses(train::TrainConfig cfg) {
  cfg.pp = 1;
  cfg.pipeline_layers.clear();
  cfg.virtual_stages = 1;
  Communicator self = world().split(world().rank(), 0, "self");
  return train_losses(cfg, self);
}

// Every step's loss and gradient norm and the validation loss (the same sequences at every
// layout); a NaN fails, but for the norm of an fp16 step skipped in both.
// The norms within rel_norm (rel where negative; 16-bit runs: see train_fixtures.hpp).
void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rel = 1e-5,
                  double rel_norm = -1) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string name = value_name(i, a.size());
    const bool norm = name.rfind("gradient", 0) == 0;
    if (norm && std::isnan(a[i]) && std::isnan(b[i])) continue;
    EXPECT_LE(std::fabs(a[i] - b[i]), (norm && rel_norm >= 0 ? rel_norm : rel) * std::fabs(b[i]))
        << name << ": " << a[i] << " against " << b[i];
  }
}

// 4 micro-batches per pipeline per step.
train::TrainConfig pipeline_config(int pp) {
  train::TrainConfig c = tiny_config();
  c.pp = pp;
  c.global_batch = static_cast<long>(c.micro_batch) * (world().size() / pp) * 4;
  return c;
}

}  // namespace

TEST(TrainerPipeline, SchedulesMatchSingleRank) {
  for (int pp : {2, 4}) {
    if (world().size() % pp != 0) continue;
    train::TrainConfig cfg = pipeline_config(pp);
    const std::vector<double> single = single_rank_losses(cfg);
    for (const char* schedule : {"gpipe", "1f1b"}) {
      SCOPED_TRACE(std::string(schedule) + " pp=" + std::to_string(pp));
      cfg.schedule = schedule;
      expect_close(train_losses(cfg, world()), single);
    }
  }
}

// Interleaved: rank s holds pieces s and pp + s of 2 * pp; 8 layers give every piece one or
// more at PP 4.
TEST(TrainerPipeline, InterleavedMatchesSingleRank) {
  for (int pp : {2, 4}) {
    if (world().size() % pp != 0) continue;
    SCOPED_TRACE("interleaved V=2 pp=" + std::to_string(pp));
    train::TrainConfig cfg = pipeline_config(pp);
    cfg.layers = 8;
    cfg.schedule = "interleaved";
    cfg.virtual_stages = 2;
    expect_close(train_losses(cfg, world()), single_rank_losses(cfg));
  }
}

// Generation through the stages (the key/value cache per chunk, rows passed on, the last
// stage choosing) gives the single-rank model's tokens after the same training: 40 tokens
// from a 2-token prompt, past seq-len 16, so the window's restarts run through the stages too.
TEST(TrainerPipeline, GenerationMatchesSingleRank) {
  struct Layout {
    int pp, tp, virtual_stages, layers;
  };
  for (const Layout l : {Layout{2, 1, 1, 4}, Layout{2, 1, 2, 8}, Layout{4, 1, 1, 4},
                         Layout{2, 2, 2, 8}}) {
    if (world().size() % (l.pp * l.tp) != 0) continue;
    SCOPED_TRACE("pp " + std::to_string(l.pp) + " tp " + std::to_string(l.tp) + " V " +
                 std::to_string(l.virtual_stages));
    train::TrainConfig cfg = pipeline_config(l.pp);
    cfg.tp = l.tp;
    cfg.layers = l.layers;
    cfg.virtual_stages = l.virtual_stages;
    cfg.schedule = l.virtual_stages > 1 ? "interleaved" : "1f1b";
    cfg.global_batch = static_cast<long>(cfg.micro_batch) * (world().size() / (l.pp * l.tp)) * 4;
    cfg.steps = 3;
    const train::SamplingConfig sampling{1.0, 0};
    train::Trainer piped(cfg, world());
    piped.run();
    const std::vector<std::int32_t> got = piped.generate({'a', 'b'}, 40, sampling);

    train::TrainConfig one = cfg;
    one.pp = 1;
    one.tp = 1;
    one.virtual_stages = 1;
    one.schedule = "1f1b";
    Communicator self = world().split(world().rank(), 0, "self");
    train::Trainer single(one, self);
    single.run();
    EXPECT_EQ(got, single.generate({'a', 'b'}, 40, sampling));
  }
}

// A diverged model's logits (NaN) are refused by the last stage, which chooses the token:
// every stage fails with it instead of waiting for the token.
TEST(TrainerPipeline, GenerationFromNaNLogitsFailsEveryStage) {
  train::TrainConfig cfg = pipeline_config(2);
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * (world().size() / 2);
  train::Trainer t(cfg, world());
  dtrain::ParameterStore& params = t.model().parameters();
  for (const dtrain::ParamInfo& p : params)
    if (p.name == "ln_f.weight")  // on the last stage only
      for (std::size_t i = 0; i < p.local_numel(); ++i) params.param(p)[i] = std::nanf("");
  try {
    t.generate({'a', 'b'}, 3, train::SamplingConfig{1.0, 0});
    ADD_FAILURE() << "generated from NaN logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
}

TEST(TrainerPipeline, InterleavedUntiedWithTensorParallelism) {
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  train::TrainConfig cfg = tiny_config();
  cfg.pp = 2;
  cfg.tp = 2;
  cfg.sequence_parallel = true;
  cfg.tie_embeddings = false;
  cfg.schedule = "interleaved";
  cfg.virtual_stages = 2;
  cfg.pipeline_layers = "2,1,1,1";
  cfg.layers = 5;
  cfg.global_batch = static_cast<long>(cfg.micro_batch) * 4;  // dp 1, 4 micro-batches
  train::TrainConfig single = cfg;
  single.tp = 1;
  single.sequence_parallel = false;
  expect_close(train_losses(cfg, world()), single_rank_losses(single));
}

TEST(TrainerPipeline, UntiedExplicitSplitAndZeroOne) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  train::TrainConfig cfg = pipeline_config(2);
  cfg.tie_embeddings = false;
  cfg.pipeline_layers = "3,1";
  expect_close(train_losses(cfg, world()), single_rank_losses(cfg));
  if (world().size() < 4) return;  // ZeRO shards over dp
  cfg = pipeline_config(2);
  cfg.zero = 1;  // ZeRO-1 shards each stage's arena over dp
  expect_close(train_losses(cfg, world()), single_rank_losses(cfg));
}

TEST(TrainerPipeline, InvalidLayoutsFailOnEveryRank) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  auto message = [](const train::TrainConfig& cfg) -> std::string {
    try {
      train::Trainer t(cfg, world());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_config);
      return e.what();
    }
    return "";
  };
  train::TrainConfig cfg = pipeline_config(2);
  cfg.layers = 1;
  EXPECT_NE(message(cfg).find("--layers 1 is fewer than the 2 pipeline stages"),
            std::string::npos);
  for (int V : {1, 2}) {
    cfg = pipeline_config(2);
    cfg.schedule = "interleaved";
    cfg.virtual_stages = V;
    cfg.global_batch = static_cast<long>(cfg.micro_batch) * (world().size() / 2) * 3;
    EXPECT_NE(message(cfg).find("(3) to be a multiple of --pp (2)"), std::string::npos);
  }
  cfg = pipeline_config(2);
  cfg.schedule = "interleaved";
  cfg.virtual_stages = 2;
  cfg.layers = 3;
  EXPECT_NE(message(cfg).find("--layers 3 is fewer than the 4 pipeline stages (--pp x "
                              "--virtual-stages)"),
            std::string::npos);
  cfg.layers = 4;
  cfg.pipeline_layers = "1,1,2";
  EXPECT_NE(message(cfg).find("--pipeline-layers lists 3 stages, the pipeline has 4"),
            std::string::npos);
  cfg = pipeline_config(2);
  cfg.virtual_stages = 2;  // with 1f1b
  EXPECT_NE(message(cfg).find("--virtual-stages 2 needs --schedule interleaved"),
            std::string::npos);
  cfg = tiny_config();
  cfg.virtual_stages = 2;
  EXPECT_NE(message(cfg).find("--virtual-stages 2 needs --pp > 1"), std::string::npos);
}

TEST(TrainerPipeline, WithTensorParallelism) {
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  struct Case {
    bool sequence_parallel;
    const char* schedule;
  };
  for (const Case c : {Case{false, "1f1b"}, Case{true, "1f1b"}, Case{true, "gpipe"}}) {
    SCOPED_TRACE(std::string("PP=2 x TP=2 ") + c.schedule + (c.sequence_parallel ? ", sequence parallel" : ""));
    train::TrainConfig cfg = tiny_config();
    cfg.pp = 2;
    cfg.tp = 2;
    cfg.sequence_parallel = c.sequence_parallel;
    cfg.schedule = c.schedule;
    cfg.global_batch = static_cast<long>(cfg.micro_batch) * 4;  // dp 1, 4 micro-batches
    train::TrainConfig single = cfg;
    single.tp = 1;
    single.sequence_parallel = false;
    expect_close(train_losses(cfg, world()), single_rank_losses(single));
  }
}

// All three at once, DP 2 x TP 2 x PP 2 on 8 ranks (its own CTest entry, trainer_3d.np8): each
// schedule, with sequence parallelism and ZeRO 1 sharding each stage's optimiser over the two
// replicas, against single-rank training on the same global batch.
TEST(TrainerPipeline, DataTensorAndPipelineParallelTogether) {
  if (world().size() != 8) GTEST_SKIP() << "needs 8 ranks";
  struct Case {
    const char* schedule;
    bool sequence_parallel;
    int zero;
    const char* precision;  // bf16: against one rank in bf16, within 3e-5 (docs/mixed-precision.md)
  };
  for (const Case c : {Case{"1f1b", true, 1, "fp32"}, Case{"gpipe", false, 0, "fp32"},
                       Case{"interleaved", true, 1, "fp32"}, Case{"1f1b", true, 1, "bf16"}}) {
    SCOPED_TRACE(std::string("DP=2 x TP=2 x PP=2 ") + c.schedule +
                 (c.sequence_parallel ? ", sequence parallel" : "") + ", ZeRO " + std::to_string(c.zero) +
                 ", " + c.precision);
    train::TrainConfig cfg = tiny_config();
    cfg.precision = c.precision;
    cfg.pp = 2;
    cfg.tp = 2;
    cfg.sequence_parallel = c.sequence_parallel;
    cfg.zero = c.zero;
    cfg.schedule = c.schedule;
    if (cfg.schedule == "interleaved") cfg.virtual_stages = 2;
    cfg.global_batch = static_cast<long>(cfg.micro_batch) * 2 * 4;  // dp 2, 4 micro-batches each
    train::TrainConfig single = cfg;
    single.tp = 1;
    single.sequence_parallel = false;
    single.zero = 0;
    expect_close(train_losses(cfg, world()), single_rank_losses(single),
                 cfg.precision == "fp32" ? 1e-5 : 3e-5, cfg.precision == "fp32" ? 1e-5 : 2e-3);
  }
}

// --deterministic with a pipeline: close to single-rank training, and bit-identical losses
// whatever the data-parallel degree (PP=2 x DP=1 on two ranks against PP=2 x DP=2 on four,
// at ZeRO 0 and 1), in fp32 and in bf16 and fp16, whose rounded gradients the norm (clipping
// is active) must see whole.
TEST(TrainerPipeline, DeterministicMatchesAcrossDataParallelism) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  struct Case {
    const char* schedule;
    const char* precision;
  };
  for (const Case c : {Case{"gpipe", "fp32"}, Case{"1f1b", "fp32"}, Case{"1f1b", "bf16"}, Case{"1f1b", "fp16"}}) {
    SCOPED_TRACE(std::string(c.schedule) + " " + c.precision);
    train::TrainConfig cfg = tiny_config();
    cfg.pp = 2;
    cfg.schedule = c.schedule;
    cfg.precision = c.precision;
    cfg.deterministic = true;
    cfg.global_batch = static_cast<long>(cfg.micro_batch) * 4;
    Communicator pair = world().split(world().rank() / 2, world().rank(), "pipeline pair");
    const std::vector<double> dp1 = train_losses(cfg, pair);
    // (16-bit: the split changes the order of the fp32 sums before each rounding, as in
    // Precision.TensorAndPipelineParallelMatchTheSingleRank16BitRun)
    expect_close(dp1, single_rank_losses(cfg), cfg.precision == "fp32" ? 1e-5 : 3e-5,
                 cfg.precision == "fp32" ? 1e-5 : 2e-3);
    if (world().size() == 4) {
      for (int zero : {0, 1}) {  // ZeRO 1 shards the optimiser over the two replicas
        cfg.zero = zero;
        const std::vector<double> dp2 = train_losses(cfg, world());
        for (std::size_t i = 0; i < dp1.size(); ++i)  // validation included
          if (!(std::isnan(dp1[i]) && std::isnan(dp2[i])))  // an fp16 step skipped in both
            EXPECT_NEAR(dp1[i], dp2[i], i + 1 < dp1.size() ? 0.0 : 1e-12 * std::fabs(dp1[i]))
            << "zero " << zero << ", " << value_name(i, dp1.size());
      }
    }
  }
}
