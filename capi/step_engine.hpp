#pragma once
// The optimiser step shared by byom and built-in models: bucketed data-parallel gradient
// average, global-norm clipping and AdamW (optionally ZeRO-1 sharded) over a ParameterStore.
#include <memory>

#include "dtrain.h"
#include "dtrain/comm/communicator.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/parallel/gradient_sync.hpp"

namespace dtrain::capi {

// Validated copy of a caller's dt_optimizer_config_t (NULL: the defaults).
dt_optimizer_config_t read_optimizer_config(const dt_optimizer_config_t* cfg);

class StepEngine {
 public:
  // params must be allocated; both it and dp outlive the engine.
  StepEngine(Communicator& dp, ParameterStore& params, const dt_optimizer_config_t& cfg);
  // Averages the arena's gradients over dp, clips, updates the arena's parameters.
  // Returns the global gradient norm before clipping. Collective over dp.
  double step(float lr);
  long steps() const { return optimizer_->steps_taken(); }
  // For checkpoints: the AdamW state, and whether it holds only this rank's ZeRO piece.
  optim::AdamW& optimizer() { return *optimizer_; }
  bool sharded() const { return cfg_.zero_stage >= 1; }

 private:
  double gradient_norm();

  Communicator& dp_;
  ParameterStore& params_;
  dt_optimizer_config_t cfg_;
  std::vector<parallel::Range> ranges_;
  std::unique_ptr<parallel::GradientSync> sync_;
  std::unique_ptr<optim::AdamW> optimizer_;
};

}  // namespace dtrain::capi
