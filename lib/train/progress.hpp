#pragma once
// Turns step timings into metrics and the human-readable progress line.
#include <string>

#include "dtrain/train/metrics.hpp"

namespace dtrain::train {

class Progress {
 public:
  // start_step: the steps taken before this run (a resumed run's, or earlier runs' of the same
  // Trainer); its ETA and summary count the steps this run takes.
  Progress(long start_step, long total_steps, long tokens_per_step, double flops_per_token,
           double peak_flops, double entropy_rate);
  double mfu(double tokens_per_s) const;
  StepMetrics metrics(long step, double loss, double val_loss, double lr, double grad_norm,
                      double step_seconds, double elapsed_seconds) const;
  std::string line(const StepMetrics& m, std::uint64_t rank_bytes, double elapsed_seconds) const;
  // steps: the step reached (seconds: this run's); tokens_per_s 0: not timed (one step, which pays one-time costs)
  std::string summary(long steps, double loss, double val_loss, double seconds,
                      double tokens_per_s, double mfu, std::uint64_t rank_bytes) const;

 private:
  long start_step_;
  long total_steps_;
  long tokens_per_step_;
  double flops_per_token_;
  double peak_flops_;
  double entropy_rate_;
};

}  // namespace dtrain::train
