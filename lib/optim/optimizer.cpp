#include "dtrain/optim/optimizer.hpp"

#include <cmath>

#include "dtrain/core/error.hpp"

namespace dtrain::optim {
namespace {
void check_segments(const std::vector<Segment>& segments, std::size_t numel) {
  for (const Segment& s : segments) {
    DTRAIN_CHECK(s.offset + s.numel <= numel, Errc::invalid_argument,
                 "optimizer segment [" << s.offset << ", " << s.offset + s.numel
                                       << ") exceeds the arena of " << numel << " elements");
  }
}
}  // namespace

AdamW::AdamW(Device& dev, std::vector<Segment> segments, std::size_t numel, AdamWConfig cfg)
    : dev_(dev),
      segments_(std::move(segments)),
      cfg_(cfg),
      m_(dev, numel * sizeof(float)),
      v_(dev, numel * sizeof(float)) {
  check_segments(segments_, numel);
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale) {
  ++step_;
  for (const Segment& s : segments_) {
    dev_.adamw(params + s.offset, grads + s.offset, exp_avg() + s.offset, exp_avg_sq() + s.offset,
               static_cast<std::int64_t>(s.numel), lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
               s.decay ? cfg_.weight_decay : 0.0f, static_cast<int>(step_), grad_scale);
  }
}

Sgd::Sgd(Device& dev, std::vector<Segment> segments, std::size_t numel, float momentum,
         float weight_decay)
    : dev_(dev), segments_(std::move(segments)), momentum_(momentum), weight_decay_(weight_decay) {
  check_segments(segments_, numel);
  if (momentum_ != 0.0f) momentum_buf_ = DeviceBuffer(dev, numel * sizeof(float));
}

void Sgd::step(float* params, const float* grads, float lr, float grad_scale) {
  float* mom = momentum_ != 0.0f ? momentum_buf_.as<float>() : nullptr;
  for (const Segment& s : segments_) {
    dev_.sgd(params + s.offset, grads + s.offset, mom ? mom + s.offset : nullptr,
             static_cast<std::int64_t>(s.numel), lr, momentum_, s.decay ? weight_decay_ : 0.0f,
             grad_scale);
  }
}

float clip_factor(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm) || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

}  // namespace dtrain::optim
