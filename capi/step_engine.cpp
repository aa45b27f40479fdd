#include "step_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "dtrain/device/device.hpp"
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
  if (!(out.eps > 0 && std::isfinite(out.eps))) bad("optimizer eps must be positive and finite");
  if (!(out.weight_decay >= 0 && std::isfinite(out.weight_decay)))
    bad("optimizer weight_decay must be finite and >= 0");
  if (!(out.clip_grad >= 0)) bad("optimizer clip_grad must be >= 0 (0 disables clipping)");
  if (out.zero_stage < 0 || out.zero_stage > 3) bad("optimizer zero_stage must be 0, 1, 2 or 3");
  // Bytes fit a size_t far below the cap (a terabyte): no wrap in the bucket size.
  if (!(out.bucket_mb > 0 && out.bucket_mb <= 1 << 20))
    bad("optimizer bucket_mb must be positive and at most 1048576 (a terabyte)");
  return out;
}

namespace {

// One range per tensor, each reaching to the next tensor so that they tile the arena.
std::vector<parallel::Range> tensor_ranges(const ParameterStore& params) {
  std::vector<parallel::Range> ranges;
  const auto& infos = params.infos();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    const std::size_t end = i + 1 < infos.size() ? infos[i + 1].offset : params.numel();
    ranges.push_back({infos[i].offset, end});
  }
  return ranges;
}

parallel::GradReduction reduction(int zero_stage) {
  if (zero_stage >= 2) return parallel::GradReduction::shard;
  return zero_stage == 1 ? parallel::GradReduction::reduce_scatter
                         : parallel::GradReduction::all_reduce;
}

}  // namespace

StepEngine::StepEngine(Communicator& dp, ParameterStore& params, const dt_optimizer_config_t& cfg,
                       std::vector<parallel::Range> ready_ranges, ModelSplit split, DType low)
    : dp_(dp),
      split_(split),
      params_(params),
      cfg_(cfg),
      low_(check_float_format(low, "StepEngine")),
      scaler_(low == DType::f16 ? optim::LossScaler(optim::LossScalerConfig{}) : optim::LossScaler()) {
  if (ready_ranges.empty()) ready_ranges = tensor_ranges(params);
  // ZeRO 3 gathers parameters bucket by bucket: one bucket per range makes the units the
  // model's own (a GPT's units are its grad-ready ranges), and the gradient pieces a rank
  // owns exactly its parameter pieces.
  const std::size_t bucket_bytes =
      cfg.zero_stage == 3 ? 0 : static_cast<std::size_t>(cfg.bucket_mb * 1024 * 1024);
  const auto mode = reduction(cfg.zero_stage);
  sync_ = std::make_unique<parallel::GradientSync>(dp, params.grads(), ready_ranges, bucket_bytes,
                                                   mode, &params.device());
  if (cfg.zero_stage == 3) gather_ = parallel::gather_by_bucket(dp, params.device(), params.params(), *sync_);
  auto segments = mode == parallel::GradReduction::all_reduce
                      ? parallel::parameter_segments(params)
                      : parallel::owned_segments(params, sync_->owned());
  optim::AdamWConfig a;
  a.beta1 = cfg.beta1;
  a.beta2 = cfg.beta2;
  a.eps = cfg.eps;
  a.weight_decay = cfg.weight_decay;
  optimizer_ = std::make_unique<optim::AdamW>(params.device(), std::move(segments), params.numel(), a);
  if (low_ != DType::f32) {
    // fp32 masters of this rank's segments; the arena (what every pass reads) gets them
    // rounded. Every replica starts from the same values, so each rounds the pieces other
    // ranks own itself (what ZeRO 1/2 would share): construction communicates nothing, and a
    // rank that runs out of memory here can fail every rank instead of leaving them waiting.
    optimizer_->use_master_weights(params.params(), low_);
    if (!gather_) {
      params.device().round_to_16bit(params.params(), params.params(),
                                     static_cast<std::int64_t>(params.numel()), low_);
      sync_->reserve_all_gather(low_);  // the steps' sharing allocates nothing
    }
  }
  if (!split_.tp && !split_.pp) return;
  const bool tp_root = !split_.tp || split_.tp->rank() == 0;
  const bool second_wte = split_.tied && split_.tied->rank() != 0;
  for (const optim::Segment& seg : optimizer_->segments()) {  // each lies inside one tensor
    for (const ParamInfo& p : params_) {
      if (seg.offset < p.offset || seg.offset >= p.offset + p.numel) continue;
      if ((p.tp_sharded || tp_root) && !(second_wte && p.name == "wte")) {
        norm_starts_.push_back(static_cast<std::int64_t>(seg.offset));
        norm_lengths_.push_back(static_cast<std::int64_t>(seg.numel));
      }
    }
  }
  norm_sums_.resize(norm_starts_.size());
}

void StepEngine::reduce_over_split(void* value, DType type, ReduceOp op) {
  if (split_.tp) split_.tp->all_reduce(value, value, 1, type, op);
  if (split_.pp) split_.pp->all_reduce(value, value, 1, type, op);
}

void StepEngine::sum_tied_copies() {
  if (!split_.tied) return;
  const ParamInfo& w = params_.at("wte");
  split_.tied->all_reduce(params_.grad(w), params_.grad(w), w.local_numel(), DType::f32, ReduceOp::sum);
}

void StepEngine::begin_backward() {
  // Not the step's last backward as far as the sync knows: the step divides by dp itself,
  // since only the program knows how many backwards a step has.
  sync_->begin(shards_gradients() && dp_.size() > 1, false);
}

void StepEngine::end_backward() { sync_->finish(); }  // launches what the model never reported

std::vector<int> StepEngine::units_overlapping(std::size_t first, std::size_t last) const {
  std::vector<int> units;
  const auto& buckets = sync_->buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b)
    if (buckets[b].first < last && first < buckets[b].last) units.push_back(static_cast<int>(b));
  return units;
}

// Over what this rank holds averaged; summed over dp when the state is sharded, and over
// the TP slices and pipeline stages of a split model.
double StepEngine::gradient_norm() {
  Device& dev = params_.device();
  const float* g = params_.grads();
  if (split_.tp || split_.pp) {
    dev.sum_squares_runs(g, norm_starts_.data(), norm_lengths_.data(), norm_starts_.size(),
                         norm_sums_.data());
    double sq = 0;
    for (double v : norm_sums_) sq += v;
    if (cfg_.zero_stage >= 1) dp_.all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
    reduce_over_split(&sq, DType::f64, ReduceOp::sum);
    return std::sqrt(sq);
  }
  if (cfg_.zero_stage == 0) return std::sqrt(dev.sum_squares(g, static_cast<std::int64_t>(params_.numel())));
  double local = 0;
  for (const optim::Segment& s : optimizer_->segments())
    local += dev.sum_squares(g + s.offset, static_cast<std::int64_t>(s.numel));
  dp_.all_reduce(&local, &local, 1, DType::f64, ReduceOp::sum);
  return std::sqrt(local);
}

void StepEngine::share_parameters() {
  if (!gather_) sync_->all_gather(params_.params(), low_);  // 16-bit values: 16-bit words
}

void StepEngine::parameters_written(std::size_t first, std::size_t last) {
  if (low_ == DType::f32) return;
  optimizer_->take_master_weights(params_.params(), first, last);
  Device& dev = params_.device();
  // ZeRO 3 holds (and the program wrote) only this rank's pieces; otherwise all of it.
  const std::vector<parallel::Range> whole{{first, last}};
  for (const parallel::Range& r : gather_ ? sync_->owned() : whole) {
    const std::size_t lo = std::max(first, r.first), hi = std::min(last, r.second);
    float* p = params_.params() + lo;
    if (lo < hi) dev.round_to_16bit(p, p, static_cast<std::int64_t>(hi - lo), low_);
  }
}

bool StepEngine::overflowed() {
  Device& dev = params_.device();
  int bad = 0;
  for (const optim::Segment& s : optimizer_->segments())
    if (!bad && dev.any_nonfinite(params_.grads() + s.offset, static_cast<std::int64_t>(s.numel))) bad = 1;
  dp_.all_reduce(&bad, &bad, 1, DType::i32, ReduceOp::max);
  reduce_over_split(&bad, DType::i32, ReduceOp::max);  // every stage skips the step alike
  return bad != 0;
}

double StepEngine::step(float lr) {
  sum_tied_copies();  // before the reduction over dp, as a single rank sums both uses
  if (shards_gradients()) {
    // Each backward summed its gradients of every rank into the pieces: sum -> average.
    if (dp_.size() > 1) {
      const float inv = 1.0f / static_cast<float>(dp_.size());
      for (const parallel::Range& r : sync_->owned())
        params_.device().scale(params_.grads() + r.first, inv,
                               static_cast<std::int64_t>(r.second - r.first));
    }
  } else {
    sync_->begin(dp_.size() > 1);
    sync_->finish();  // launches every bucket
  }
  if (low_ != DType::f32) {
    // The reduced gradients in the 16-bit format (fp16: beyond 65504 they become inf).
    for (const optim::Segment& s : optimizer_->segments()) {
      float* g = params_.grads() + s.offset;
      params_.device().round_to_16bit(g, g, static_cast<std::int64_t>(s.numel), low_);
    }
  }
  const float unscale = scaler_.inverse_scale();  // of the scale this step's backwards used
  if (scaler_.enabled() && !scaler_.update(overflowed()))
    return std::numeric_limits<double>::quiet_NaN();  // skipped: nothing changes but the scale
  const double norm = gradient_norm() * static_cast<double>(unscale);
  // The norm's sum covers every gradient once, so every rank sees the same non-finite value:
  // agreed. AdamW would write NaNs into the parameters and moments (clipping passes a
  // non-finite norm by). (A tensor replicated over a grid's TP group counts on its TP rank 0
  // only: a byom program whose other replicas hold an inf there is not caught.)
  if (!std::isfinite(norm))
    throw AgreedError(Errc::invalid_argument,
                      "the gradients hold an inf or NaN (global norm " + std::to_string(norm) +
                          "): the step is not taken, the parameters and the optimizer state are as they were");
  const float clip = optim::clip_factor(norm, cfg_.clip_grad) * unscale;
  if (gather_) gather_->drop_unheld();
  optimizer_->step(params_.params(), params_.grads(), lr, clip);
  // ZeRO 1/2: every rank's updated piece to all. ZeRO 3 keeps the pieces; passes gather them.
  share_parameters();
  params_.device().trim_memory(Device::Trim::unused);  // spare memory no step took goes back
  return norm;
}

void StepEngine::zero_grads() {
  if (shards_gradients())
    sync_->zero_grads();  // the other pieces are dropped, not zeroed
  else
    params_.zero_grads();
}

HeldUnits::HeldUnits(StepEngine& engine, std::size_t first, std::size_t last)
    : gather_(engine.gather()) {
  if (!gather_) return;
  const std::vector<int> units = engine.units_overlapping(first, last);
  try {
    for (std::size_t i = 0; i < units.size(); ++i) {
      gather_->acquire(units[i], i + 1 < units.size() ? units[i + 1] : -1);
      units_.push_back(units[i]);
    }
  } catch (...) {
    release();  // no destructor runs for a constructor that throws
    throw;
  }
}

HeldUnits::~HeldUnits() { release(); }

void HeldUnits::release() noexcept {
  try {
    for (int u : units_) gather_->release(u);
  } catch (...) {  // a failed wait while unwinding: the entry point reports the first error
  }
  units_.clear();
}

}  // namespace dtrain::capi
