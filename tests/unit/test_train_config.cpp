#include <gtest/gtest.h>

#include <cmath>

#include "dtrain/core/error.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/optim/schedule.hpp"
#include "dtrain/train/config.hpp"
#include "dtrain/train/metrics.hpp"

using namespace dtrain;

namespace {
void expect_config_error(train::TrainConfig c, int world, const std::string& fragment) {
  try {
    c.validate(world);
    ADD_FAILURE() << "no error, expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(TrainConfig, DefaultsAreValid) {
  train::TrainConfig c;
  EXPECT_NO_THROW(c.validate(1));
  EXPECT_NO_THROW(c.validate(2));
  EXPECT_EQ(c.resolved_dp(2), 2);
  c.global_batch = 64;
  EXPECT_EQ(c.accum_steps(2), 4);
  for (int zero : {1, 2, 3}) {  // every ZeRO stage has a deterministic mode
    c.zero = zero;
    c.deterministic = true;
    EXPECT_NO_THROW(c.validate(2)) << "zero " << zero;
  }
}

TEST(TrainConfig, BadValuesNameTheOption) {
  train::TrainConfig c;
  c.heads = 3;
  expect_config_error(c, 1, "--heads (3) must divide --d-model (128)");
  c = {};
  c.seq_len = 0;
  expect_config_error(c, 1, "--seq-len must be positive");
  // AdamW's settings as the float it uses: 0.99999999 is 1, 1e-50 is 0.
  c = {};
  c.beta2 = 0.99999999;
  expect_config_error(c, 1, "beta2 must be in [0, 1) as a float, got 0.99999999");
  c = {};
  c.beta1 = 1.0 - 1e-9;
  expect_config_error(c, 1, "beta1 must be in [0, 1) as a float");
  c = {};
  c.eps = 1e-50;
  expect_config_error(c, 1, "eps must be positive and finite as a float, got 1e-50");
  c = {};
  c.global_batch = 10;
  expect_config_error(c, 2, "--global-batch (10) must be a multiple");
  c = {};
  c.tp = 3;
  expect_config_error(c, 4, "does not divide the 4 ranks");
  c = {};
  c.pp = 2;
  c.layers = 1;
  expect_config_error(c, 2, "--layers 1 is fewer than the 2 pipeline stages");
  c = {};
  c.pp = 2;
  c.schedule = "interleaved";
  c.global_batch = 24;  // 3 micro-batches
  expect_config_error(c, 2, "needs the micro-batches per step (3) to be a multiple of --pp (2)");
  c.global_batch = 32;
  c.layers = 4;
  c.virtual_stages = 4;
  expect_config_error(c, 2, "--layers 4 is fewer than the 8 pipeline stages");
  c = {};
  c.pp = 2;
  c.pipeline_layers = "1,2";
  expect_config_error(c, 2, "--pipeline-layers adds up to 3 layers");
  c.pp = 1;
  c.pipeline_layers = "1,1";
  expect_config_error(c, 2, "--pipeline-layers lists 2 stages, the pipeline has 1");
  c = {};
  c.sequence_parallel = true;
  expect_config_error(c, 2, "--sequence-parallel needs --tp > 1");
  c = {};
  c.zero = 5;
  expect_config_error(c, 1, "--zero must be 0, 1, 2 or 3");
  c = {};
  c.zero = 3;
  c.pp = 2;
  expect_config_error(c, 2, "--zero 3 with --pp 2 is not supported");
  c = {};
  c.device = "tpu";
  expect_config_error(c, 1, "--device must be auto, cpu or cuda");
  c = {};
  c.precision = "fp8";
  expect_config_error(c, 1, "--precision must be fp32, bf16 or fp16");
  c = {};
  c.param_storage = "bf16";
  expect_config_error(c, 1, "--param-storage must be auto, 16bit or fp32, got 'bf16'");
  c = {};
  c.loss_scale = 0.5;
  expect_config_error(c, 1, "--loss-scale must be at least --min-loss-scale");
  c = {};
  c.loss_scale_window = 0;
  expect_config_error(c, 1, "--loss-scale-window must be positive");
  c = {};
  c.min_loss_scale = 0;
  expect_config_error(c, 1, "--min-loss-scale must be in [2^-24, 2^64], got 0");
  // a float scale of inf (every step skipped, a checkpoint no resume reads) or of 0
  c = {};
  c.loss_scale = 1e39;
  expect_config_error(c, 1, "--loss-scale must be in [2^-24, 2^64], got 1e+39");
  c = {};
  c.loss_scale = c.min_loss_scale = 1e-50;
  expect_config_error(c, 1, "--min-loss-scale must be in [2^-24, 2^64]");
  c = {};
  c.loss_scale = 0x1p64;  // the largest allowed
  EXPECT_NO_THROW(c.validate(1));
}

// run_config (to_ini) holds --val-fraction only with --data, so that it is a config file the
// built-in corpus's run takes again; the ranks' agreement (all_settings_ini) compares it always.
TEST(TrainConfig, ValFractionIsWrittenWhereItApplies) {
  train::TrainConfig c;
  c.val_fraction = 0.2;
  EXPECT_EQ(c.to_ini().find("val-fraction"), std::string::npos);
  EXPECT_NE(c.all_settings_ini().find("val-fraction = 0.2"), std::string::npos);
  c.data = "corpus.bin";
  EXPECT_NE(c.to_ini().find("val-fraction = 0.2"), std::string::npos);
  const std::string all = c.all_settings_ini();
  EXPECT_EQ(all.find("val-fraction"), all.rfind("val-fraction"));  // once
}

TEST(TrainConfig, MixedPrecisionIsAccepted) {
  for (const char* p : {"fp32", "bf16", "fp16"}) {
    train::TrainConfig c;
    c.precision = p;
    c.deterministic = true;
    EXPECT_NO_THROW(c.validate(2)) << p;
    EXPECT_NE(c.to_ini().find(std::string("precision = ") + p), std::string::npos);
  }
  for (const char* storage : {"auto", "16bit", "fp32"}) {
    train::TrainConfig c;
    c.precision = "bf16";
    c.param_storage = storage;
    EXPECT_NO_THROW(c.validate(1)) << storage;
    EXPECT_NE(c.to_ini().find(std::string("param-storage = ") + storage), std::string::npos);
  }
}

TEST(Schedule, WarmupThenCosine) {
  optim::LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(109), 0.1, 1e-12);
  EXPECT_NEAR(s.at(10 + 99 / 2.0), 0.55, 0.02);
  for (long t = 11; t < 110; ++t) EXPECT_LE(s.at(t), s.at(t - 1));
}

TEST(Schedule, EdgesOfTheWarmUp) {
  EXPECT_DOUBLE_EQ((optim::LrSchedule{1.0, 0.1, 0, 5}).at(0), 1.0);  // no warm-up
  EXPECT_NEAR((optim::LrSchedule{1.0, 0.1, 0, 5}).at(4), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ((optim::LrSchedule{1.0, 0.1, 3, 4}).at(3), 1.0);  // one step after: no decay
  EXPECT_DOUBLE_EQ((optim::LrSchedule{1.0, 0.1, 3, 5}).at(3), 1.0);  // two: lr, then min-lr
  EXPECT_NEAR((optim::LrSchedule{1.0, 0.1, 3, 5}).at(4), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ((optim::LrSchedule{1.0, 0.1, 10, 5}).at(4), 0.5);  // the run ends warming up
}

TEST(Clip, Factor) {
  EXPECT_FLOAT_EQ(optim::clip_factor(0.5, 1.0), 1.0f);
  EXPECT_NEAR(optim::clip_factor(4.0, 1.0), 0.25f, 1e-6);
  EXPECT_FLOAT_EQ(optim::clip_factor(4.0, 0.0), 1.0f);
  EXPECT_FLOAT_EQ(optim::clip_factor(NAN, 1.0), 1.0f);
}

TEST(Metrics, JsonLineHasTheContractFields) {
  train::StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.lr = 1e-3;
  m.grad_norm = NAN;
  m.memory_per_rank = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  const std::string j = train::to_json(m);
  for (const char* key : {"\"step\":3", "\"loss\":2.5", "\"lr\":", "\"grad_norm\":null",
                          "\"tokens_per_s\":", "\"step_ms\":", "\"mfu\":",
                          "\"peak_param_bytes\":[1,5]", "\"peak_activation_bytes\":[4,8]"}) {
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
  }
  EXPECT_EQ(j.find("val_loss"), std::string::npos);
}
