#pragma once
// The training loop: data -> forward/backward over micro-batches -> data-parallel gradient
// average -> global-norm clipping -> optimiser step -> metrics. One Trainer per rank; all
// ranks of the world communicator construct and run it together.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/param_residency.hpp"
#include "dtrain/train/config.hpp"
#include "dtrain/train/metrics.hpp"
#include "dtrain/train/sampling.hpp"

namespace dtrain {
class GptModel;
class ProcessGrid;
namespace optim {
class AdamW;
class LossScaler;
}  // namespace optim
}  // namespace dtrain

namespace dtrain::train {

struct DTRAIN_API TrainSummary {
  long steps = 0;               // steps taken (fp16: skipped ones included)
  long skipped_steps = 0;       // fp16: steps skipped because their gradients overflowed (since the run began, across resumes)
  double final_loss = 0;        // training loss of the last step; NaN from run() when it trained none
  double final_val_loss = -1;   // negative: never evaluated
  double entropy_rate = -1;     // of the data source where known (nats/token)
  double seconds = 0;           // wall time of the step loop
  double tokens_per_s = 0;      // global, over the whole loop after the first step
  double mfu = 0;
  MemoryUse memory;             // this rank
  std::uint64_t allocations_after_first_step = 0;  // host buffer allocations in steps 2..N
  // Steps 2..N: time blocked waiting for data-parallel communication (gradient reduction,
  // ZeRO-3 parameter gathers) that did not overlap compute, and the steps' total time.
  double exposed_comm_seconds = 0;
  double timed_step_seconds = 0;
  long start_step = 0;          // step this run started from (a resume, or where training had got to)
  bool stopped_by_signal = false;  // SIGTERM/SIGUSR1 ended the loop early (see signals.hpp)
  // Every step trained and the last one evaluated (not --eval-only): a stop signal that came
  // at the end (during the final save) left nothing of the training undone.
  bool finished = false;
  std::string last_checkpoint;  // path of the last checkpoint written by run(), if any
};

class DTRAIN_API Trainer {
 public:
  // Validates cfg (throws Error on every rank alike), builds the grid, device, model,
  // optimiser and data loader. Allocates every buffer the loop needs. Then resumes per
  // cfg.resume (ckpt::resolve_resume): auto continues from cfg.save_dir's newest checkpoint.
  Trainer(const TrainConfig& cfg, Communicator& world);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  TrainSummary run();                 // the whole loop (or one evaluation with eval_only)
  double train_step();                // one optimiser step; returns its mean loss (past
                                      // cfg.steps too: run() stops there, this does not)
  double evaluate();                  // mean validation loss over eval_batches batches (under
                                      // 16-bit parameter storage held whole, as generate())
  // Continues `context` (token ids; empty: the first token of validation sample 0) by `count`
  // tokens chosen from the model's logits (sampling.hpp) at the last of the last seq-len
  // tokens (computed with the model's key/value cache, GptModel::decode), with random numbers
  // keyed by (cfg.seed, token index); returns the new tokens, and gives each to on_token (if
  // set) as soon as it is chosen. Collective over the world; every rank returns the same
  // tokens. With pipeline stages the rows pass through them and the last stage chooses.
  // Under 16-bit parameter storage the parameters are held whole throughout where the fp32
  // arena takes at most half the device's free memory (as by whole_parameters(): on_token
  // must not train or load).
  std::vector<std::int32_t> generate(std::vector<std::int32_t> context, int count,
                                     const SamplingConfig& sampling,
                                     const std::function<void(std::int32_t)>& on_token = {});
  long step() const;                  // optimiser steps taken so far
  // Loss of every step this Trainer took (after a resume, from the resumed step on).
  const std::vector<double>& loss_history() const;
  // The global gradient norm of the last step, before clipping, as the metrics' grad_norm
  // (NaN after an fp16 step skipped for overflow; 0 before this Trainer's first step).
  double last_grad_norm() const;

  // Checkpoints (docs/checkpoint-format.md). run() saves every cfg.save_every steps, at the
  // end and when stopped by a signal. Both are collective over the world communicator.
  // save_checkpoint writes to cfg.save_dir (Errc::invalid_config without one), returns the path.
  std::string save_checkpoint();
  // Replaces parameters, optimiser state and step with the checkpoint's; verifies it first.
  void load_checkpoint(const std::string& path);

  // The pieces, for programs and tests that inspect the state.
  GptModel& model();
  // Between steps the model's parameter arena holds only this rank's pieces under ZeRO 3,
  // and nothing under 16-bit parameter storage (--precision bf16|fp16 on the CPU); while
  // the returned scope lives it holds every parameter, for reading (evaluate() may run).
  // There, train_step(), save_checkpoint() and load_checkpoint() inside it are refused
  // (Errc::invalid_argument); elsewhere the scope holds nothing and they run, so a program
  // meant for every layout ends the scope first. Collective over the data-parallel group
  // under ZeRO 3.
  parallel::HeldParameters whole_parameters();
  optim::AdamW& optimizer();
  optim::LossScaler& loss_scaler();   // fp16 dynamic loss scaling (disabled otherwise)
  ProcessGrid& grid();
  bool optimizer_sharded() const;     // ZeRO >= 1: the optimiser holds this rank's piece only

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Every rank calls this after a phase that may have failed on some ranks only. Returns the
// lowest failing world rank, or -1 when all succeeded, so exactly one rank reports.
DTRAIN_API int first_failed_rank(Communicator& world, bool failed);

}  // namespace dtrain::train
