#pragma once
// The Trainer's state (internal to lib/train): the layout, the model, the gradient
// reduction in use, the optimiser, the data and the run's bookkeeping. Built in
// trainer_setup.cpp; the per-step gradient paths live in trainer_gradients.cpp, the public
// Trainer methods in trainer.cpp.
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timer.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/tensor_parallel.hpp"
#include "dtrain/optim/loss_scaler.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/optim/schedule.hpp"
#include "dtrain/parallel/fixed_order_norm.hpp"
#include "dtrain/parallel/fixed_order_sum.hpp"
#include "dtrain/parallel/gradient_sync.hpp"
#include "dtrain/parallel/packed_parameters.hpp"
#include "dtrain/parallel/param_gather.hpp"
#include "dtrain/parallel/pipeline.hpp"
#include "dtrain/parallel/zero.hpp"
#include "dtrain/train/data.hpp"
#include "dtrain/train/signals.hpp"
#include "dtrain/train/trainer.hpp"
#include "dtrain/ckpt/initial_weights.hpp"
#include "train/peak_flops.hpp"
#include "train/precision.hpp"
#include "train/progress.hpp"

namespace dtrain::train {

struct Trainer::State {
  TrainConfig cfg;
  Communicator& world;
  Device& dev;
  // On a GPU: the world over a device transport, which the groups below are split from, so
  // that gradients, parameters and activations move between GPUs (empty on the CPU).
  Communicator device_world;
  ProcessGrid grid;
  std::unique_ptr<TokenSource> source;
  std::uint64_t data_fingerprint;  // source's, read once (checkpoints record it, resumes compare it)
  // Whether discard hands memory back on every rank (the CPU; GPUs with virtual memory
  // management): what 16-bit storage and ZeRO 2/3's memory savings need.
  bool memory_released_everywhere;
  bool stores_16bit;  // 16-bit parameter storage (--param-storage, decided before the model)
  GptModel model;
  // Exactly one of these reduces gradients over the data-parallel group.
  std::unique_ptr<parallel::GradientSync> sync;          // bucketed, overlapped (ZeRO 0-3)
  std::unique_ptr<parallel::ParamGather> gather;         // ZeRO 3: parameters by unit
  // Mixed precision below ZeRO 3 where discarding hands memory back: 16-bit parameter
  // storage, widened unit by unit around the passes. At most one of gather and packed.
  std::unique_ptr<parallel::PackedParameters> packed;
  std::unique_ptr<parallel::FixedOrderSum> fixed_order;  // --deterministic
  std::unique_ptr<parallel::FixedOrderNorm> fixed_norm;  // --deterministic
  std::vector<parallel::Range> whole_arena;              // {[0, numel)}: made once
  std::vector<optim::Segment> whole_arena_segments;      // whole_arena as optimiser segments
  optim::AdamW optimizer;
  optim::LrSchedule schedule;
  // Mixed precision: the arena's 16-bit format (f32: plain fp32 training), and the fp16
  // loss scaler (disabled otherwise). The fp32 masters live in the optimiser.
  DType low = DType::f32;
  optim::LossScaler scaler;
  double last_loss_scale = 1;  // the scale the last step's backward was seeded with
  BatchLoader loader;
  std::unique_ptr<parallel::PipelineExecutor> pipeline;  // --pp > 1
  // Bubble timers: this stage's busy time (pipeline step minus time blocked on messages) and
  // the step's makespan (slowest stage), for the last step and summed over the steps after
  // the first.
  double busy_last = 0, span_last = 0, busy_sum = 0, span_sum = 0;
  std::vector<double> stage_bubbles;                // per pipeline stage, for the log
  AlignedBuffer tokens, targets;
  MetricsWriter metrics;
  MemoryUse memory;
  std::vector<MemoryUse> memory_per_rank;
  double peak_flops_per_rank = 0;
  bool peak_flops_given = false;  // from DTRAIN_PEAK_FLOPS rather than measured
  long step = 0;
  double last_grad_norm = 0;
  double last_lr = 0;
  std::vector<double> losses;
  std::vector<double> micro_losses;  // per local micro-batch (deterministic mode, no pipeline)
  std::unique_ptr<ckpt::Checkpointer> checkpointer;  // made at the first save or load
  std::unique_ptr<ckpt::InitialWeights> initial;     // --init-from, during set-up only
  // The checkpoint the run continues from as set-up found it ("": a fresh run), which decides
  // whether --init-from is read.
  std::string resume_from;
  long start_step = 0;
  long last_saved_step = -1;
  // The last finished evaluation (a checkpoint of its step records it): a run that stopped
  // during its last step's evaluation evaluates when it is resumed with nothing to train.
  long last_val_step = -1;
  double last_val_loss = 0;
  // Training sequences consumed up to step consumed_before_step (the checkpoint resumed from).
  std::uint64_t consumed_before = 0;
  long consumed_before_step = 0;
  bool watch_stop = false;  // inside run(): poll for SIGTERM/SIGUSR1
  bool stopped = false;     // all ranks agreed to stop

  State(const TrainConfig& c, Communicator& w);
  std::vector<optim::Segment> optimizer_segments();
  void hold_own_pieces();  // ZeRO 2/3 at set-up
  void open_initial_weights();  // --init-from
  void init_weights(const ParameterStore::ArenaRanges* only);
  // After set-up: memory it held that no step needs goes back (a GPU's spare arena chunks).
  void release_spare_memory();
  void shard_parameters(std::unique_ptr<parallel::ParamGather> g);
  void pack_parameters();
  void use_parameters_by_unit(parallel::ParamResidency& r);
  // What keeps the arena's parameters only around their use (null: the arena is whole).
  parallel::ParamResidency* residency() const {
    return gather ? static_cast<parallel::ParamResidency*>(gather.get()) : packed.get();
  }
  std::size_t peak_param_bytes() const;  // in a pass, when residency() is not null
  // Collective over world, after a first step: the units a pass held are known, and
  // memory_per_rank's parameter bytes become the peak (held between steps + in a pass).
  void count_param_peaks();
  // Errc::invalid_argument when a Trainer::whole_parameters() scope is open: `what` would
  // change the stored parameters, which the held arena does not follow.
  void check_not_held(const char* what) const;
  // Under 16-bit parameter storage, the whole parameters held for passes with too little work
  // each to widen every unit again for each (generation's tokens, an evaluation's batches),
  // where the fp32 arena takes at most half the device's free memory on every rank (collective
  // over the world); empty otherwise, and under ZeRO 3, whose ranks hold only their pieces.
  std::optional<parallel::HeldParameters> hold_parameters_if_they_fit();
  double sync_gradients_bucketed();
  double sync_gradients_fixed_order();
  double sync_gradients_pipeline();
  double sync_gradients_pipeline_fixed_order();
  double run_pipeline(float dloss, const parallel::PipelineExecutor::BackwardDone& done);
  // The backward seed of a micro-batch: its share of the mean, times the fp16 loss scale.
  float seed(float share) const { return share * scaler.scale(); }
  bool apply_overflow_check();
  // A loss or a gradient norm that is not finite (divergence) fails every rank before the
  // update: training on would write NaNs into the parameters and then into checkpoints that
  // replace good ones. what: "loss", "gradient norm".
  void check_finite(const char* what, double value);
  void log_pipeline_bubble(bool whole_run);
  void reduce_tied_embedding();
  double gradient_norm();
  // The gradient ranges this rank adds to the global norm (not --deterministic), and room for
  // their sums of squares.
  std::vector<std::int64_t> norm_starts, norm_lengths;
  std::vector<double> norm_sums;
  void plan_norm_runs();
  bool counts_in_norm(const ParamInfo& p) const;
  // --deterministic: whether every rank ends the reduction with the whole gradient (ZeRO 0,
  // and pipelines, whose tied embedding copies are summed afterwards) or only its pieces.
  bool fixed_order_whole() const { return cfg.zero == 0 || grid.pp_size() > 1; }
  // Mixed precision: the reduced gradients rounded to 16 bits before the norm and the update.
  // Where every rank holds the whole sum, the whole (the norm reads all of it), else its pieces.
  const std::vector<optim::Segment>& gradient_segments_to_round() const {
    return fixed_order && fixed_order_whole() ? whole_arena_segments : optimizer.segments();
  }
  void clear_gradients(bool hand_back);
  void finish_fixed_order_sum();
  void hold_only_owned_gradients();
  // ZeRO 1/2: every rank's updated pieces to all (under mixed precision the masters rounded,
  // which travel as 16-bit words).
  void share_updated_parameters();
  double forward_micro(Split split, std::uint64_t first_sample);
  double average_over_dp(double loss_sum, int n_micro);
  ckpt::Checkpointer& checkpoints();
  void check_finite_val_loss(double val);  // a complete validation pass's loss
  bool agree_stop();
  std::string stop_cause();  // for the log, once agree_stop() said yes
  // Inside run(), before micro-batch `micro` of n (a step's, without pipeline stages, whose
  // schedule interleaves them; an evaluation's): whether all ranks agreed to stop there,
  // so a step of many micro-batches stops part-way (its gradients are dropped). The vote is a
  // non-blocking all-reduce started before one micro-batch and read before the next, so the
  // ranks need not meet at every micro-batch; a stop comes within two of the signal.
  bool stop_before_micro_batch(long micro, long n);
  int stop_vote_flag = 0;
  Request stop_vote;
  // What the gradient passes return when they stopped part-way (stopped is set).
  static constexpr double kStoppedPartWay = std::numeric_limits<double>::quiet_NaN();
  int accum() const { return loader.plan().accum_steps; }
  double comm_wait_seconds() const {
    return (sync ? sync->wait_seconds() : 0) + (gather ? gather->wait_seconds() : 0) +
           (fixed_order ? fixed_order->wait_seconds() : 0);
  }
  long tokens_per_step() const {
    return static_cast<long>(loader.plan().global_batch()) * cfg.seq_len;
  }
};

}  // namespace dtrain::train
