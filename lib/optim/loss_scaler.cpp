#include "dtrain/optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

#include "dtrain/core/error.hpp"

namespace dtrain::optim {

LossScaler::LossScaler(const LossScalerConfig& cfg) : enabled_(true), cfg_(cfg) {
  auto finite_positive = [](double v) { return std::isfinite(v) && v > 0; };
  DTRAIN_CHECK(finite_positive(cfg.min_scale) && finite_positive(cfg.max_scale) &&
                   cfg.min_scale <= cfg.max_scale,
               Errc::invalid_config,
               "loss scale bounds must satisfy 0 < min <= max, got min " << cfg.min_scale
                                                                         << ", max " << cfg.max_scale);
  DTRAIN_CHECK(cfg.initial_scale >= cfg.min_scale && cfg.initial_scale <= cfg.max_scale,
               Errc::invalid_config,
               "initial loss scale " << cfg.initial_scale << " is outside [" << cfg.min_scale
                                     << ", " << cfg.max_scale << "]");
  DTRAIN_CHECK(cfg.backoff > 0 && cfg.backoff < 1, Errc::invalid_config,
               "loss scale backoff must be in (0, 1), got " << cfg.backoff);
  DTRAIN_CHECK(cfg.growth >= 1 && std::isfinite(cfg.growth), Errc::invalid_config,
               "loss scale growth must be >= 1, got " << cfg.growth);
  DTRAIN_CHECK(cfg.growth_interval > 0, Errc::invalid_config,
               "loss scale growth interval must be positive, got " << cfg.growth_interval);
  scale_ = cfg.initial_scale;
  configured_max_ = cfg.max_scale;
}

bool LossScaler::update(bool overflow) {
  if (!enabled_) return true;
  if (overflow) {
    // Halving below the minimum would only skip more steps: the gradients are not finite
    // even at the smallest scale allowed, so fp16 cannot represent this training.
    DTRAIN_CHECK(scale_ > cfg_.min_scale, Errc::invalid_config,
                 "gradients overflow (inf/NaN) even at the minimum loss scale "
                     << cfg_.min_scale << " after " << skipped_
                     << " skipped steps; training cannot continue at this precision (train in bf16 or fp32, "
                        "dtrain-gpt's --precision, or at a lower learning rate; or a lower minimum, "
                        "dtrain-gpt's --min-loss-scale)");
    scale_ = std::max(cfg_.min_scale, scale_ * cfg_.backoff);
    clean_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_ >= cfg_.growth_interval) {
    scale_ = std::min(cfg_.max_scale, scale_ * cfg_.growth);
    clean_ = 0;
  }
  return true;
}

void LossScaler::set_scale(double scale, long clean_steps_in_a_row, long skipped_steps) {
  if (!enabled_) return;  // a disabled scaler stays at 1
  // A restored scale above the ceiling came from a run whose --loss-scale set a higher one:
  // the ceiling follows it, so the run goes on as it would have without the resume. From the
  // configured one each time: a load does not depend on what an earlier one restored.
  cfg_.max_scale = std::isfinite(scale) ? std::max(configured_max_, scale) : configured_max_;
  scale_ = std::min(cfg_.max_scale, std::max(cfg_.min_scale, scale));
  clean_ = std::max(0L, clean_steps_in_a_row);
  skipped_ = std::max(0L, skipped_steps);
}

}  // namespace dtrain::optim
