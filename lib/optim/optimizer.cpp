#include "dtrain/optim/optimizer.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "dtrain/core/error.hpp"

namespace dtrain::optim {
namespace {
// Validates the segments and returns where each one's state starts in a compact buffer
// (the last entry is the total).
std::vector<std::size_t> state_layout(const std::vector<Segment>& segments, std::size_t numel) {
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for (const Segment& s : segments) {
    DTRAIN_CHECK(s.offset + s.numel <= numel, Errc::invalid_argument,
                 "optimizer segment [" << s.offset << ", " << s.offset + s.numel
                                       << ") exceeds the arena of " << numel << " elements");
    offsets.push_back(total);
    total += s.numel;
  }
  offsets.push_back(total);
  return offsets;
}

// Settings no run uses: a file saved with them is refused as damaged, and a bad lr turns every
// parameter into NaN at once (TrainConfig and the C ABI say so in their own terms first).
AdamWConfig checked(const AdamWConfig& c) {
  DTRAIN_CHECK(c.beta1 >= 0 && c.beta1 < 1, Errc::invalid_argument, "AdamW beta1 must be in [0, 1), got " << c.beta1);
  DTRAIN_CHECK(c.beta2 >= 0 && c.beta2 < 1, Errc::invalid_argument, "AdamW beta2 must be in [0, 1), got " << c.beta2);
  DTRAIN_CHECK(c.eps > 0 && std::isfinite(c.eps), Errc::invalid_argument,
               "AdamW eps must be positive and finite, got " << c.eps);
  DTRAIN_CHECK(c.weight_decay >= 0 && std::isfinite(c.weight_decay), Errc::invalid_argument,
               "AdamW weight_decay must be finite and >= 0, got " << c.weight_decay);
  return c;
}
void check_lr(float lr, const char* who) {
  DTRAIN_CHECK(lr >= 0 && std::isfinite(lr), Errc::invalid_argument, who << ": lr must be finite and >= 0, got " << lr);
}
}  // namespace

AdamW::AdamW(Device& dev, std::vector<Segment> segments, std::size_t numel, AdamWConfig cfg)
    : dev_(dev),
      segments_(std::move(segments)),
      state_offsets_(state_layout(segments_, numel)),
      cfg_(checked(cfg)),
      m_(dev, state_offsets_.back() * sizeof(float)),
      v_(dev, state_offsets_.back() * sizeof(float)) {
  plan_ranges();
}

void AdamW::plan_ranges() {
  ranges_.clear();
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const auto st = static_cast<std::int64_t>(state_offsets_[i]);
    const auto at = static_cast<std::int64_t>(s.offset);
    ranges_.push_back({has_master_weights() ? st : at, at, st, static_cast<std::int64_t>(s.numel),
                       s.decay ? cfg_.weight_decay : 0.0f});
  }
}

namespace {
// The kernels take the step as an int. Past INT_MAX the bias corrections 1 - beta^step are
// 1 in double for every float beta < 1 ((1 - 2^-24)^(2^31 - 1) is about 1e-56), so
// INT_MAX stands for any later step exactly (a wrapped step made every update 0).
int kernel_step(long step) { return static_cast<int>(std::min<long>(step, INT_MAX)); }
}  // namespace

void AdamW::step(float* params, const float* grads, float lr, float grad_scale) {
  check_lr(lr, "AdamW::step");
  if (!ranges_.empty()) {  // 16-bit words stand for the arena's parameters (write_params_as_16bit)
    DTRAIN_CHECK(grads && (params || (has_master_weights() && words_)), Errc::invalid_argument,
                 "AdamW::step: " << (grads ? "params" : "grads") << " is null");
  }
  ++step_;
  // every segment in one device call (a GPU batches them into few launches)
  dev_.adamw_ranges(has_master_weights() ? master_weights() : params, grads, exp_avg(),
                    exp_avg_sq(), ranges_.data(), ranges_.size(), lr, cfg_.beta1, cfg_.beta2,
                    cfg_.eps, kernel_step(step_), grad_scale);
  round_params(params);
}

void AdamW::write_rounded(float* params, std::size_t offset, const float* masters,
                          std::size_t n) {
  const auto count = static_cast<std::int64_t>(n);
  if (words_) {
    dev_.convert_to_16bit(words_ + offset, masters, count, low_);
  } else {
    dev_.round_to_16bit(params + offset, masters, count, low_);
  }
}

void AdamW::write_params_as_16bit(std::uint16_t* words) {
  DTRAIN_CHECK(!words || has_master_weights(), Errc::invalid_argument,
               "AdamW::write_params_as_16bit needs master weights");
  words_ = words;
}

void AdamW::use_master_weights(float* params, DType low) {
  use_master_weights(low);
  load_master_weights(params);
}

void AdamW::use_master_weights(DType low) {
  check_16bit_format(low, "AdamW::use_master_weights");
  if (!has_master_weights()) w_ = DeviceBuffer(dev_, state_offsets_.back() * sizeof(float));
  low_ = low;
  plan_ranges();  // the updates now go to the masters
}

void AdamW::take_master_weights(const float* params, std::size_t first, std::size_t last) {
  DTRAIN_CHECK(has_master_weights(), Errc::invalid_argument,
               "AdamW::take_master_weights needs use_master_weights first");
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const std::size_t lo = std::max(first, s.offset), hi = std::min(last, s.offset + s.numel);
    if (lo >= hi) continue;
    dev_.copy_floats(master_weights() + state_offsets_[i] + (lo - s.offset), params + lo,
                     static_cast<std::int64_t>(hi - lo));
  }
}

void AdamW::load_master_weights(float* params) {
  if (!has_master_weights()) return;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    dev_.copy_floats(master_weights() + state_offsets_[i], params + s.offset,
                     static_cast<std::int64_t>(s.numel));
  }
  round_params(params);
}

void AdamW::round_params(float* params) {
  if (!has_master_weights()) return;
  // segments that follow each other in the arena do in the (compact) masters too
  for_each_contiguous_run(segments_, [&](std::size_t offset, std::size_t n, std::size_t first) {
    write_rounded(params, offset, master_weights() + state_offsets_[first], n);
  });
}

Sgd::Sgd(Device& dev, std::vector<Segment> segments, std::size_t numel, float momentum,
         float weight_decay)
    : dev_(dev), segments_(std::move(segments)), momentum_(momentum), weight_decay_(weight_decay) {
  state_offsets_ = state_layout(segments_, numel);
  if (momentum_ != 0.0f) momentum_buf_ = DeviceBuffer(dev, state_offsets_.back() * sizeof(float));
}

void Sgd::step(float* params, const float* grads, float lr, float grad_scale) {
  check_lr(lr, "Sgd::step");
  DTRAIN_CHECK(segments_.empty() || (params && grads), Errc::invalid_argument,
               "Sgd::step: " << (grads ? "params" : "grads") << " is null");
  float* mom = momentum_ != 0.0f ? momentum_buf_.as<float>() : nullptr;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    dev_.sgd(params + s.offset, grads + s.offset, mom ? mom + state_offsets_[i] : nullptr,
             static_cast<std::int64_t>(s.numel), lr, momentum_, s.decay ? weight_decay_ : 0.0f,
             grad_scale);
  }
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

}  // namespace dtrain::optim
