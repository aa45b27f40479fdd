#pragma once
// The training loop: data -> forward/backward over micro-batches -> data-parallel gradient
// average -> global-norm clipping -> optimiser step -> metrics. One Trainer per rank; all
// ranks of the world communicator construct and run it together.
#include <cstdint>
#include <memory>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/export.hpp"
#include "dtrain/train/config.hpp"
#include "dtrain/train/metrics.hpp"

namespace dtrain::train {

struct DTRAIN_API TrainSummary {
  long steps = 0;               // optimiser steps taken
  double final_loss = 0;        // training loss of the last step
  double final_val_loss = -1;   // negative: never evaluated
  double entropy_rate = -1;     // of the data source where known (nats/token)
  double seconds = 0;           // wall time of the step loop
  double tokens_per_s = 0;      // global, over the whole loop after the first step
  double mfu = 0;
  MemoryUse memory;             // this rank
  std::uint64_t allocations_after_first_step = 0;  // host buffer allocations in steps 2..N
};

class DTRAIN_API Trainer {
 public:
  // Validates cfg (throws Error on every rank alike), builds the grid, device, model,
  // optimiser and data loader. Allocates every buffer the loop needs.
  Trainer(const TrainConfig& cfg, Communicator& world);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  TrainSummary run();                 // the whole loop (or one evaluation with eval_only)
  double train_step();                // one optimiser step; returns its mean loss
  double evaluate();                  // mean validation loss over eval_batches batches
  long step() const;                  // optimiser steps taken so far
  const std::vector<double>& loss_history() const;  // loss of every step taken

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Every rank calls this after a phase that may have failed on some ranks only. Returns the
// lowest failing world rank, or -1 when all succeeded, so exactly one rank reports.
DTRAIN_API int first_failed_rank(Communicator& world, bool failed);

}  // namespace dtrain::train
