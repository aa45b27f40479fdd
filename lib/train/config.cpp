#include "dtrain/train/config.hpp"

#include <climits>
#include <cmath>

#include "core/number_text.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"
#include "dtrain/parallel/pipeline_schedule.hpp"

namespace dtrain::train {

int TrainConfig::resolved_dp(int world_size) const {
  return dp > 0 ? dp : static_cast<int>(world_size / (static_cast<long>(tp) * pp));
}

int TrainConfig::accum_steps(int world_size) const {
  const long per_step = static_cast<long>(micro_batch) * resolved_dp(world_size);
  return global_batch == 0 ? 1 : static_cast<int>(global_batch / per_step);
}

void TrainConfig::validate(int world_size) const {
  auto positive = [](long v, const char* opt) {
    DTRAIN_CHECK(v > 0, Errc::invalid_config, opt << " must be positive, got " << v);
  };
  positive(layers, "--layers");
  positive(heads, "--heads");
  positive(d_model, "--d-model");
  positive(seq_len, "--seq-len");
  positive(vocab, "--vocab");
  DTRAIN_CHECK(d_model % heads == 0, Errc::invalid_config,
               "--heads (" << heads << ") must divide --d-model (" << d_model << ")");

  positive(tp, "--tp");
  positive(pp, "--pp");
  DTRAIN_CHECK(dp >= 0, Errc::invalid_config, "--dp must be >= 0 (0 = infer), got " << dp);
  const long tp_pp = static_cast<long>(tp) * pp;  // an int product could wrap to 0
  DTRAIN_CHECK(tp_pp <= world_size && world_size % tp_pp == 0, Errc::invalid_config,
               "--tp " << tp << " x --pp " << pp << " does not divide the " << world_size
                       << (world_size == 1 ? " rank" : " ranks"));
  DTRAIN_CHECK(static_cast<long>(tp) * pp * resolved_dp(world_size) == world_size,
               Errc::invalid_config,
               "--tp " << tp << " x --pp " << pp << " x --dp " << resolved_dp(world_size)
                       << " != " << world_size << " ranks");
  DTRAIN_CHECK(zero >= 0 && zero <= 3, Errc::invalid_config, "--zero must be 0, 1, 2 or 3, got " << zero);
  DTRAIN_CHECK(schedule == "gpipe" || schedule == "1f1b" || schedule == "interleaved",
               Errc::invalid_config, "--schedule must be gpipe, 1f1b or interleaved, got '" << schedule << "'");
  positive(virtual_stages, "--virtual-stages");
  const long chunks = static_cast<long>(pp) * virtual_stages;  // an int product could wrap
  DTRAIN_CHECK(chunks <= layers, Errc::invalid_config,
               "--layers " << layers << " is fewer than the " << chunks
                           << " pipeline stages (--pp x --virtual-stages): every stage needs at "
                              "least one layer");
  // Not implemented: refuse rather than silently ignore.
  DTRAIN_CHECK(zero <= 1 || pp == 1, Errc::not_implemented,
               "--zero " << zero << " with --pp " << pp
                         << " is not supported (ZeRO 2/3 reduce every micro-step; use --zero 0 or 1 with pipelines)");
  DTRAIN_CHECK(bucket_mb > 0 && bucket_mb <= 1 << 20, Errc::invalid_config,
               "--bucket-mb must be positive and at most 1048576 (a terabyte), got " << bucket_mb);
  DTRAIN_CHECK(!sequence_parallel || tp > 1, Errc::invalid_config,
               "--sequence-parallel needs --tp > 1");
  DTRAIN_CHECK(virtual_stages == 1 || pp > 1, Errc::invalid_config,
               "--virtual-stages " << virtual_stages << " needs --pp > 1 (model chunks per pipeline rank)");

  positive(micro_batch, "--micro-batch");
  DTRAIN_CHECK(global_batch >= 0, Errc::invalid_config, "--global-batch must be >= 0, got " << global_batch);
  if (global_batch > 0) {
    const long per_step = static_cast<long>(micro_batch) * resolved_dp(world_size);
    DTRAIN_CHECK(global_batch % per_step == 0, Errc::invalid_config,
                 "--global-batch (" << global_batch << ") must be a multiple of --micro-batch x dp = "
                                    << micro_batch << " x " << resolved_dp(world_size) << " = " << per_step);
    DTRAIN_CHECK(global_batch / per_step <= INT_MAX, Errc::invalid_config,
                 "--global-batch " << global_batch << " would take " << global_batch / per_step
                                   << " micro-steps per step, more than " << INT_MAX);
  }

  // The split (also an explicit one at --pp 1, never silently ignored) and the schedule,
  // checked as every rank will build them.
  if (pp > 1 || !pipeline_layers.empty())
    parallel::partition_layers(layers, pp * virtual_stages,
                               parallel::parse_pipeline_layers(pipeline_layers));
  if (pp > 1) {
    parallel::validate_schedule(parallel::parse_schedule_kind(schedule), pp, accum_steps(world_size),
                                virtual_stages);
  }
  // Pipeline parts not implemented yet.
  DTRAIN_CHECK(!deterministic || virtual_stages == 1, Errc::not_implemented,
               "--deterministic with --virtual-stages " << virtual_stages
                                                        << " is not implemented (use gpipe or 1f1b)");

  DTRAIN_CHECK(lr > 0 && std::isfinite(lr), Errc::invalid_config, "--lr must be positive and finite, got " << lr);
  DTRAIN_CHECK(min_lr >= 0 && min_lr <= lr, Errc::invalid_config,
               "--min-lr must be in [0, --lr " << lr << "], got " << min_lr << " (its default is "
                                               << TrainConfig{}.min_lr << ": with a smaller --lr, give a smaller --min-lr)");
  DTRAIN_CHECK(warmup_steps >= 0 && warmup_steps <= INT_MAX, Errc::invalid_config,
               "--warmup-steps must be in [0, " << INT_MAX << "], got " << warmup_steps);
  DTRAIN_CHECK(weight_decay >= 0 && std::isfinite(weight_decay), Errc::invalid_config,
               "--weight-decay must be finite and >= 0, got " << weight_decay);
  // AdamW's decay multiplies the weights by 1 - lr x weight-decay a step: at 1 or more it
  // zeroes or flips them every step.
  DTRAIN_CHECK(lr * weight_decay < 1, Errc::invalid_config,
               "--weight-decay " << weight_decay << " with --lr " << lr << " multiplies the weights by 1 - "
                                 << lr * weight_decay << " a step: lr x weight-decay must be below 1");
  DTRAIN_CHECK(clip_grad >= 0 && std::isfinite(clip_grad), Errc::invalid_config,
               "--clip-grad must be finite and >= 0 (0 disables), got " << clip_grad);
  // As AdamW uses them, in float: 0.99999999 rounds to 1 (an infinite bias correction),
  // 1e-50 to 0 (0/0 where a gradient is always 0).
  DTRAIN_CHECK(beta1 >= 0 && static_cast<float>(beta1) < 1.0f, Errc::invalid_config,
               "beta1 must be in [0, 1) as a float, got " << shortest_text(beta1));
  DTRAIN_CHECK(beta2 >= 0 && static_cast<float>(beta2) < 1.0f, Errc::invalid_config,
               "beta2 must be in [0, 1) as a float, got " << shortest_text(beta2));
  DTRAIN_CHECK(static_cast<float>(eps) > 0 && std::isfinite(static_cast<float>(eps)), Errc::invalid_config,
               "eps must be positive and finite as a float, got " << shortest_text(eps));
  DTRAIN_CHECK(val_fraction >= 0 && val_fraction < 1, Errc::invalid_config,
               "--val-fraction must be in [0, 1), got " << val_fraction);
  DTRAIN_CHECK(val_data.empty() || !data.empty(), Errc::invalid_config,
               "--val-data needs --data (the built-in corpus has its own validation split)");
  DTRAIN_CHECK(!data.empty() || val_fraction == TrainConfig().val_fraction, Errc::invalid_config,
               "--val-fraction needs --data (the built-in corpus has its own validation split)");

  DTRAIN_CHECK(steps >= 0 && steps <= INT_MAX, Errc::invalid_config,
               "--steps must be in [0, " << INT_MAX << "], got " << steps);
  DTRAIN_CHECK(device == "auto" || device == "cpu" || device == "cuda", Errc::invalid_config,
               "--device must be auto, cpu or cuda, got '" << device << "'");
  DTRAIN_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16",
               Errc::invalid_config, "--precision must be fp32, bf16 or fp16, got '" << precision << "'");
  DTRAIN_CHECK(param_storage == "auto" || param_storage == "16bit" || param_storage == "fp32",
               Errc::invalid_config,
               "--param-storage must be auto, 16bit or fp32, got '" << param_storage << "'");
  // The scale multiplies fp32 losses and its inverse the gradients: beyond 2^64 it overflows
  // (a float ends near 2^128) and below 2^-24 every fp16 gradient rounds to 0.
  constexpr double kLowestScale = 0x1p-24, kHighestScale = 0x1p64;
  DTRAIN_CHECK(min_loss_scale >= kLowestScale && min_loss_scale <= kHighestScale,
               Errc::invalid_config,
               "--min-loss-scale must be in [2^-24, 2^64], got " << min_loss_scale);
  DTRAIN_CHECK(loss_scale >= kLowestScale && loss_scale <= kHighestScale, Errc::invalid_config,
               "--loss-scale must be in [2^-24, 2^64], got " << loss_scale);
  DTRAIN_CHECK(loss_scale >= min_loss_scale, Errc::invalid_config,
               "--loss-scale must be at least --min-loss-scale (" << min_loss_scale << "), got "
                                                                   << loss_scale);
  DTRAIN_CHECK(loss_scale_window > 0, Errc::invalid_config,
               "--loss-scale-window must be positive, got " << loss_scale_window);
  DTRAIN_CHECK(save_every >= 0, Errc::invalid_config, "--save-every must be >= 0");
  DTRAIN_CHECK(save_every == 0 || !save_dir.empty(), Errc::invalid_config,
               "--save-every " << save_every << " needs --save-dir");
  DTRAIN_CHECK(keep >= 1, Errc::invalid_config, "--keep must be at least 1, got " << keep);
  DTRAIN_CHECK(!resume.empty(), Errc::invalid_config,
               "--resume must be auto, none or a checkpoint path");
  DTRAIN_CHECK(init_from.empty() || resume == "auto" || resume == "none", Errc::invalid_config,
               "--init-from starts a fresh run and --resume " << resume << " continues one: give one of them");
  positive(log_every, "--log-every");
  DTRAIN_CHECK(eval_every >= 0, Errc::invalid_config, "--eval-every must be >= 0");
  positive(eval_batches, "--eval-batches");
}

}  // namespace dtrain::train
