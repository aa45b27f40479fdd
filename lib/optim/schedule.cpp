#include "dtrain/optim/schedule.hpp"

#include <cmath>

#include "dtrain/core/error.hpp"

namespace dtrain::optim {

double LrSchedule::at(long step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const long decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 1) return lr;
  double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps - 1);
  if (progress > 1.0) progress = 1.0;
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return min_lr + cosine * (lr - min_lr);
}

void LrSchedule::validate() const {
  DTRAIN_CHECK(lr > 0 && std::isfinite(lr), Errc::invalid_config, "--lr must be positive and finite, got " << lr);
  DTRAIN_CHECK(min_lr >= 0 && min_lr <= lr, Errc::invalid_config,
               "--min-lr must be in [0, lr], got " << min_lr << " with lr " << lr);
  DTRAIN_CHECK(warmup_steps >= 0, Errc::invalid_config,
               "--warmup-steps must be >= 0, got " << warmup_steps);
  DTRAIN_CHECK(total_steps >= 1, Errc::invalid_config, "--steps must be >= 1, got " << total_steps);
}

}  // namespace dtrain::optim
