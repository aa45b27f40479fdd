#pragma once
// Dynamic loss scaling for fp16 training (docs/mixed-precision.md). The backward pass is
// seeded with scale() so small gradients survive fp16's narrow range; the caller then checks
// the gradients for inf/NaN, agrees on the answer over all ranks, and calls update() with it:
//   overflow: the step is skipped and the scale multiplied by backoff (an overflow at the
//             minimum scale is a hard Error: training cannot proceed in fp16);
//   clean:    the update is applied with the gradients multiplied by 1/scale, and after
//             growth_interval clean steps in a row the scale grows by `growth` (up to max).
// Pure logic without communication, so every rank that feeds it the same agreed flags holds
// the same scale. A disabled scaler (fp32, bf16) has scale 1 and never skips.
#include "dtrain/export.hpp"

namespace dtrain::optim {

struct DTRAIN_API LossScalerConfig {
  double initial_scale = 65536.0;  // 2^16
  long growth_interval = 2000;     // clean steps in a row before the scale grows
  double backoff = 0.5;            // factor after an overflow
  double growth = 2.0;             // factor after growth_interval clean steps
  double min_scale = 1.0;          // an overflow at this scale is an Error
  double max_scale = 16777216.0;   // 2^24: growth stops here
};

class DTRAIN_API LossScaler {
 public:
  LossScaler() = default;  // disabled
  // Enabled; throws Error(Errc::invalid_config) when the configuration is inconsistent.
  explicit LossScaler(const LossScalerConfig& cfg);

  bool enabled() const { return enabled_; }
  // The factor to seed the backward pass with, and its inverse for the update.
  float scale() const { return static_cast<float>(scale_); }
  float inverse_scale() const { return static_cast<float>(1.0 / scale_); }

  // Records the step's overflow flag (agreed by every rank). Returns true when the step's
  // update should be applied, false when it is to be skipped. Disabled: always true.
  // Throws Error(Errc::invalid_config) when an overflow happens at the minimum scale.
  bool update(bool overflow);

  long skipped_steps() const { return skipped_; }
  long clean_steps_in_a_row() const { return clean_; }
  const LossScalerConfig& config() const { return cfg_; }
  // Restores a scale (a resumed run, tests); raised to min_scale, and above max_scale it
  // raises max_scale (the scale's own run allowed it). The count of clean steps toward the
  // next growth restarts at clean_steps_in_a_row, that of skipped steps at skipped_steps.
  void set_scale(double scale, long clean_steps_in_a_row = 0, long skipped_steps = 0);

 private:
  bool enabled_ = false;
  LossScalerConfig cfg_;
  double configured_max_ = 0;  // cfg_.max_scale as constructed (set_scale may raise cfg_'s)
  double scale_ = 1.0;
  long clean_ = 0;
  long skipped_ = 0;
};

}  // namespace dtrain::optim
