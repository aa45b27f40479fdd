#pragma once
// The optimiser step shared by byom and built-in models: bucketed data-parallel gradient
// reduction, global-norm clipping and AdamW over a ParameterStore, with the ZeRO stages:
//  0  gradients all-reduced in the step, everything replicated;
//  1  gradients reduce-scattered in the step, AdamW state sharded;
//  2  as 1, but every backward reduce-scatters into this rank's gradient pieces and drops
//     the rest (begin_backward/end_backward around each backward);
//  3  as 2, and only this rank's parameter pieces are kept: passes gather them unit by unit
//     (gather()), readers of whole tensors hold them (HeldUnits, WholeParameters).
#include <memory>
#include <vector>

#include "dtrain.h"
#include "dtrain/comm/communicator.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/optim/loss_scaler.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/parallel/gradient_sync.hpp"
#include "dtrain/parallel/param_gather.hpp"

namespace dtrain::capi {

// Validated copy of a caller's dt_optimizer_config_t (NULL: the defaults).
dt_optimizer_config_t read_optimizer_config(const dt_optimizer_config_t* cfg);

// How a model is split besides data parallelism (every group borrowed; null: not split so).
struct ModelSplit {
  Communicator* tp = nullptr;  // tensor parallelism: slices of the split tensors
  Communicator* pp = nullptr;  // pipeline stages: each holds some of the tensors
  // A pipeline's first and last stage when both hold the tied embedding "wte": its two
  // gradients are summed before the step (first stage: rank 0, which counts it in the norm).
  Communicator* tied = nullptr;
};

class StepEngine {
 public:
  // Not collective (it only allocates). params must be allocated (under mixed precision and
  // ZeRO 1/2 holding the same values on every rank of dp, which each rounds itself); it, dp
  // and the split's groups outlive the engine. ready_ranges:
  // arena ranges in the order backward completes them, tiling the arena (a GPT's
  // grad_ready_ranges(), which are also its ZeRO-3 units); empty: one range per tensor.
  // split: the norm sums the TP slices and the pipeline stages, counting tensors replicated
  // over the TP group and the tied embedding's copies once. low: bf16 or f16 for mixed
  // precision (fp32 master weights in the optimiser, the arena's parameters rounded to low;
  // f16 also scales the loss), f32 otherwise.
  StepEngine(Communicator& dp, ParameterStore& params, const dt_optimizer_config_t& cfg,
             std::vector<parallel::Range> ready_ranges = {}, ModelSplit split = {},
             DType low = DType::f32);

  // Around every backward of a built-in model. Under ZeRO 2/3 each backward is reduced into
  // this rank's pieces at once (the other pieces are dropped, so accumulation must happen
  // there); otherwise gradients accumulate in place and the step reduces them. Collective
  // over dp under ZeRO 2/3.
  void begin_backward();
  void end_backward();
  // The grad-ready hook: [first, last) of the gradients is final for this backward.
  void ready(std::size_t first, std::size_t last) { sync_->ready(first, last); }
  // The grad-write hook: backward is about to write [first, last) (GradientSync::writing).
  void writing(std::size_t first, std::size_t last) { sync_->writing(first, last); }
  // For a model without that hook (the MLP), before its backward: every range at once.
  void writing_everything() { sync_->writing_everything(); }
  // Lets reductions and gathers in flight progress (the model's progress hook).
  void poll() {
    sync_->poll();
    if (gather_) gather_->poll();
  }

  // Sums the tied embedding's copies, averages the gradients over dp (ZeRO 0/1: reduces them
  // now; ZeRO 2/3: they are already summed into the pieces), clips, updates this rank's
  // parameters, and under ZeRO 1/2 gives every rank the whole update. Returns the global
  // gradient norm before clipping; NaN for an fp16 step skipped on overflow. Collective over
  // dp and the split's groups.
  double step(float lr);
  // What a backward pass is seeded with: the fp16 loss scale, else 1.
  float loss_scale() const { return scaler_.scale(); }
  // fp16's dynamic loss scaling (disabled otherwise): the scale, the steps it skipped; the
  // checkpoints save and restore it.
  optim::LossScaler& scaler() { return scaler_; }
  // The arena's [first, last) was overwritten with full-precision values (a tensor set by
  // the program): under mixed precision the masters take them and the arena keeps them
  // rounded. Not collective.
  void parameters_written(std::size_t first, std::size_t last);
  // Under ZeRO 1/2, every rank's parameter pieces to all (after a checkpoint load rounded
  // this rank's). Collective over dp.
  void share_parameters();
  // Zeroes the gradients this rank holds (under ZeRO 2/3 its pieces only).
  void zero_grads();

  long steps() const { return optimizer_->steps_taken(); }
  Communicator& dp() { return dp_; }
  // ZeRO 2/3: every backward reduces over dp, so forward-backward calls are collective.
  bool shards_gradients() const { return cfg_.zero_stage >= 2; }
  // For checkpoints: the AdamW state, and the ZeRO stage (1-3: it holds only this rank's
  // piece; 3: so does the parameter arena).
  optim::AdamW& optimizer() { return *optimizer_; }
  int zero_stage() const { return cfg_.zero_stage; }
  // ZeRO 3: the parameter gatherer (units = gradient buckets); null otherwise.
  parallel::ParamGather* gather() { return gather_.get(); }
  // Arena ranges this rank updates: the gradient pieces it owns (the whole arena at ZeRO 0).
  const std::vector<parallel::Range>& owned() const { return sync_->owned(); }
  // ZeRO 3: units (buckets) that overlap [first, last).
  std::vector<int> units_overlapping(std::size_t first, std::size_t last) const;

 private:
  double gradient_norm();
  bool overflowed();  // f16: any gradient this rank updates is inf or NaN, agreed by all
  void sum_tied_copies();
  // One value reduced in place over the TP group and the pipeline stages.
  void reduce_over_split(void* value, DType type, ReduceOp op);

  Communicator& dp_;
  ModelSplit split_;
  ParameterStore& params_;
  dt_optimizer_config_t cfg_;
  DType low_;
  optim::LossScaler scaler_;  // enabled for f16 only
  std::unique_ptr<parallel::GradientSync> sync_;
  std::unique_ptr<parallel::ParamGather> gather_;
  std::unique_ptr<optim::AdamW> optimizer_;
  // A split model: the arena runs this rank counts toward the norm (its owned slices of
  // split tensors; replicated tensors on TP rank 0 only; not the last stage's tied
  // embedding), and their sums of squares.
  std::vector<std::int64_t> norm_starts_, norm_lengths_;
  std::vector<double> norm_sums_;
};

// ZeRO 3: the units overlapping an arena range gathered whole for the scope's lifetime, so
// a tensor can be read as a whole; a no-op otherwise. Collective over dp under ZeRO 3.
class HeldUnits {
 public:
  HeldUnits(StepEngine& engine, std::size_t first, std::size_t last);
  ~HeldUnits();
  HeldUnits(const HeldUnits&) = delete;
  HeldUnits& operator=(const HeldUnits&) = delete;

 private:
  void release() noexcept;  // the units acquired so far
  parallel::ParamGather* gather_;
  std::vector<int> units_;  // acquired, in order
};

// ZeRO 3: every unit gathered for the scope's lifetime (the MLP's passes);
// a no-op otherwise. Collective over dp under ZeRO 3.
struct WholeParameters : parallel::HeldParameters {
  explicit WholeParameters(StepEngine& engine) : parallel::HeldParameters(engine.gather()) {}
};

}  // namespace dtrain::capi
