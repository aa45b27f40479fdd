#include "step_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "dtrain/parallel/zero.hpp"
#include "guard.hpp"

namespace dtrain::capi {

dt_optimizer_config_t read_optimizer_config(const dt_optimizer_config_t* cfg) {
  dt_optimizer_config_t out = DT_OPTIMIZER_CONFIG_INIT;
  if (!cfg) return out;
  // Fields are only ever appended: an older caller's smaller struct leaves the rest default.
  need(cfg->struct_size >= offsetof(dt_optimizer_config_t, bucket_mb) + sizeof(double),
       "optimizer->struct_size is too small: initialise it with DT_OPTIMIZER_CONFIG_INIT");
  std::memcpy(&out, cfg, std::min(cfg->struct_size, sizeof out));
  out.struct_size = sizeof out;
  auto bad = [](const char* what) { fail(DT_ERR_INVALID_CONFIG, what); };
  if (!(out.beta1 >= 0 && out.beta1 < 1)) bad("optimizer beta1 must be in [0, 1)");
  if (!(out.beta2 >= 0 && out.beta2 < 1)) bad("optimizer beta2 must be in [0, 1)");
  if (!(out.eps > 0)) bad("optimizer eps must be positive");
  if (!(out.weight_decay >= 0)) bad("optimizer weight_decay must be >= 0");
  if (!(out.clip_grad >= 0)) bad("optimizer clip_grad must be >= 0 (0 disables clipping)");
  if (out.zero_stage != 0 && out.zero_stage != 1)
    fail(DT_ERR_NOT_IMPLEMENTED, "optimizer zero_stage must be 0 or 1 in this version");
  if (!(out.bucket_mb > 0)) bad("optimizer bucket_mb must be positive");
  return out;
}

StepEngine::StepEngine(Communicator& dp, ParameterStore& params, const dt_optimizer_config_t& cfg)
    : dp_(dp), params_(params), cfg_(cfg) {
  // One ready-range per tensor, each reaching to the next tensor so they tile the arena.
  const auto& infos = params.infos();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    const std::size_t end = i + 1 < infos.size() ? infos[i + 1].offset : params.numel();
    ranges_.push_back({infos[i].offset, end});
  }
  const auto mode = cfg.zero_stage >= 1 ? parallel::GradReduction::reduce_scatter
                                        : parallel::GradReduction::all_reduce;
  sync_ = std::make_unique<parallel::GradientSync>(
      dp, params.grads(), ranges_, static_cast<std::size_t>(cfg.bucket_mb * 1024 * 1024), mode);
  auto segments = mode == parallel::GradReduction::reduce_scatter
                      ? parallel::owned_segments(params, sync_->owned())
                      : parallel::parameter_segments(params);
  optim::AdamWConfig a;
  a.beta1 = cfg.beta1;
  a.beta2 = cfg.beta2;
  a.eps = cfg.eps;
  a.weight_decay = cfg.weight_decay;
  optimizer_ = std::make_unique<optim::AdamW>(params.device(), std::move(segments), params.numel(), a);
}

// Over what this rank holds averaged; summed over dp when the state is sharded.
double StepEngine::gradient_norm() {
  Device& dev = params_.device();
  const float* g = params_.grads();
  if (cfg_.zero_stage == 0) return std::sqrt(dev.sum_squares(g, static_cast<std::int64_t>(params_.numel())));
  double local = 0;
  for (const optim::Segment& s : optimizer_->segments())
    local += dev.sum_squares(g + s.offset, static_cast<std::int64_t>(s.numel));
  dp_.all_reduce(&local, &local, 1, DType::f64, ReduceOp::sum);
  return std::sqrt(local);
}

double StepEngine::step(float lr) {
  sync_->begin(dp_.size() > 1);
  for (const auto& r : ranges_) sync_->ready(r.first, r.second);
  sync_->finish();
  const double norm = gradient_norm();
  optimizer_->step(params_.params(), params_.grads(), lr, optim::clip_factor(norm, cfg_.clip_grad));
  sync_->all_gather(params_.params());  // ZeRO-1: every rank's updated piece to all
  return norm;
}

}  // namespace dtrain::capi
