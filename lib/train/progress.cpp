#include "train/progress.hpp"

#include <cmath>
#include <cstdio>

namespace dtrain::train {
namespace {
std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

std::string human_bytes(std::uint64_t b) {
  return format("%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
}

std::string human_seconds(double s) {
  if (s < 120) return format("%.0fs", s);
  if (s < 7200) return format("%.1fmin", s / 60);
  return format("%.1fh", s / 3600);
}
}  // namespace

Progress::Progress(long start_step, long total_steps, long tokens_per_step,
                   double flops_per_token, double peak_flops, double entropy_rate)
    : start_step_(start_step),
      total_steps_(total_steps),
      tokens_per_step_(tokens_per_step),
      flops_per_token_(flops_per_token),
      peak_flops_(peak_flops),
      entropy_rate_(entropy_rate) {}

double Progress::mfu(double tokens_per_s) const {
  return peak_flops_ > 0 ? flops_per_token_ * tokens_per_s / peak_flops_ : 0.0;
}

StepMetrics Progress::metrics(long step, double loss, double val_loss, double lr,
                              double grad_norm, double step_seconds, double) const {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.val_loss = val_loss;
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.step_ms = step_seconds * 1e3;
  m.tokens_per_s = step_seconds > 0 ? tokens_per_step_ / step_seconds : 0.0;
  m.mfu = mfu(m.tokens_per_s);
  return m;
}

std::string Progress::line(const StepMetrics& m, std::uint64_t rank_bytes,
                           double elapsed_seconds) const {
  std::string s = "step " + std::to_string(m.step) + "/" + std::to_string(total_steps_) +
                  " | loss " + format("%.4f", m.loss);
  if (!(m.val_loss < 0)) s += " | val " + format("%.4f", m.val_loss);  // NaN shown
  if (entropy_rate_ > 0) s += format(" (H %.3f)", entropy_rate_);
  s += " | lr " + format("%.2e", m.lr) + " | gnorm " + format("%.3f", m.grad_norm) + " | " +
       format("%.0f tok/s", m.tokens_per_s) + " | mfu " + format("%.1f%%", 100 * m.mfu) +
       " | mem/rank " + human_bytes(rank_bytes);
  const long taken = m.step - start_step_;  // elapsed_seconds is this run's
  const double per_step = taken > 0 ? elapsed_seconds / static_cast<double>(taken) : 0;
  s += " | eta " + human_seconds(per_step * static_cast<double>(total_steps_ - m.step));
  return s;
}

std::string Progress::summary(long steps, double loss, double val_loss, double seconds,
                              double tokens_per_s, double mfu, std::uint64_t rank_bytes) const {
  std::string s = "done: " + std::to_string(steps) + " steps";
  if (start_step_ > 0) s += " (" + std::to_string(steps - start_step_) + " in this run)";
  s += " in " + format("%.1fs", seconds);
  s += std::isnan(loss) ? " | no step trained" : " | final loss " + format("%.4f", loss);
  if (!(val_loss < 0)) s += " | val " + format("%.4f", val_loss);  // NaN shown
  if (entropy_rate_ > 0) s += " | corpus entropy " + format("%.4f", entropy_rate_);
  if (tokens_per_s > 0)
    s += " | " + format("%.0f tok/s", tokens_per_s) + " | mfu " + format("%.1f%%", 100 * mfu);
  else
    s += " | tok/s not timed (the first step of a run pays one-time costs)";
  s += " | mem/rank " + human_bytes(rank_bytes);
  return s;
}

}  // namespace dtrain::train
