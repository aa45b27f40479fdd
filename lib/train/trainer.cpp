#include "dtrain/train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "dtrain/ckpt/checkpoint.hpp"
#include "dtrain/comm/process_grid.hpp"
#include "dtrain/parallel/pipeline.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/core/env.hpp"
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
#include "dtrain/parallel/param_gather.hpp"
#include "dtrain/parallel/zero.hpp"
#include "dtrain/train/data.hpp"
#include "dtrain/train/signals.hpp"
#include "train/peak_flops.hpp"
#include "train/precision.hpp"
#include "train/progress.hpp"

namespace dtrain::train {

struct Trainer::State {
  TrainConfig cfg;
  Communicator& world;
  ProcessGrid grid;
  Device& dev;
  std::unique_ptr<TokenSource> source;
  GptModel model;
  // Exactly one of these reduces gradients over the data-parallel group.
  std::unique_ptr<parallel::GradientSync> sync;          // bucketed, overlapped (ZeRO 0-3)
  std::unique_ptr<parallel::ParamGather> gather;         // ZeRO 3: parameters by unit
  std::unique_ptr<parallel::FixedOrderSum> fixed_order;  // --deterministic
  std::unique_ptr<parallel::FixedOrderNorm> fixed_norm;  // --deterministic
  std::vector<parallel::Range> whole_arena;              // {[0, numel)}: made once
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
  long step = 0;
  double last_grad_norm = 0;
  double last_lr = 0;
  std::vector<double> losses;
  std::vector<double> micro_losses;  // per local micro-batch (deterministic mode)
  std::unique_ptr<ckpt::Checkpointer> checkpointer;  // made at the first save or load
  long start_step = 0;
  long last_saved_step = -1;
  bool watch_stop = false;  // inside run(): poll for SIGTERM/SIGUSR1
  bool stopped = false;     // all ranks agreed to stop

  State(const TrainConfig& c, Communicator& w);
  std::vector<optim::Segment> optimizer_segments();
  void shard_parameters(std::unique_ptr<parallel::ParamGather> g);
  double sync_gradients_bucketed();
  double sync_gradients_fixed_order();
  double sync_gradients_pipeline();
  double sync_gradients_pipeline_fixed_order();
  double run_pipeline(float dloss, const parallel::PipelineExecutor::BackwardDone& done);
  // The backward seed of a micro-batch: its share of the mean, times the fp16 loss scale.
  float seed(float share) const { return share * scaler.scale(); }
  bool apply_overflow_check();
  void log_pipeline_bubble(bool whole_run);
  void reduce_tied_embedding();
  double duplicate_wte_squares();
  double gradient_norm();
  std::vector<char> segment_in_norm;  // ZeRO 1-3: optimiser segment counts toward the norm
  void plan_norm_segments();
  bool counts_in_norm(const ParamInfo& p) const;
  // --deterministic: whether every rank ends the reduction with the whole gradient (ZeRO 0,
  // and pipelines, whose tied embedding copies are summed afterwards) or only its pieces.
  bool fixed_order_whole() const { return cfg.zero == 0 || grid.pp_size() > 1; }
  void clear_gradients(bool hand_back);
  void finish_fixed_order_sum();
  void share_updated_parameters();
  double forward_micro(Split split, std::uint64_t first_sample);
  double average_over_dp(double loss_sum, int n_micro);
  ckpt::Checkpointer& checkpoints();
  bool agree_stop();
  int accum() const { return loader.plan().accum_steps; }
  double comm_wait_seconds() const {
    return (sync ? sync->wait_seconds() : 0) + (gather ? gather->wait_seconds() : 0) +
           (fixed_order ? fixed_order->wait_seconds() : 0);
  }
  long tokens_per_step() const {
    return static_cast<long>(loader.plan().global_batch()) * cfg.seq_len;
  }
};

namespace {

GridShape grid_shape(const TrainConfig& cfg) {
  GridShape g;
  g.tp = cfg.tp;
  g.pp = cfg.pp;
  g.dp = cfg.dp;
  return g;
}

GptConfig model_config(const TrainConfig& cfg) {
  GptConfig m;
  m.layers = cfg.layers;
  m.heads = cfg.heads;
  m.d_model = cfg.d_model;
  m.seq_len = cfg.seq_len;
  m.vocab = cfg.vocab;
  m.tie_embeddings = cfg.tie_embeddings;
  m.validate();
  return m;
}

const TrainConfig& validated(const TrainConfig& cfg, int world_size) {
  cfg.validate(world_size);
  return cfg;
}

// Kernel/BLAS threads per rank: DTRAIN_NUM_THREADS, else this node's cores shared evenly
// among its ranks (two ranks on two cores must not both spawn two threads).
Device& configured_device(const std::string& which, Communicator& world,
                           bool deterministic) {
  Device& dev = select_device(which);
  int threads = env::params().num_threads;
  if (deterministic) threads = 1;  // reductions inside kernels must not depend on threads
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, world.local_size()));
  }
  dev.set_num_threads(threads);
  // The trainer's collectives run on host buffers over MPI; device buffers need the NCCL
  // data path (docs/cuda.md), which it does not use yet. Agreed by all ranks, so every rank
  // refuses alike (one may have found a GPU where another did not).
  int on_gpu = dev.kind() == DeviceKind::cpu ? 0 : 1;
  world.all_reduce(&on_gpu, &on_gpu, 1, DType::i32, ReduceOp::max);
  DTRAIN_CHECK(on_gpu == 0 || world.size() == 1, Errc::not_implemented,
               "training on the GPU with more than one rank is not supported yet: the trainer's "
               "collectives do not use the NCCL data path (use --device cpu, or one rank)");
  return dev;
}

std::unique_ptr<TokenSource> open_source(const TrainConfig& cfg) {
  auto src = cfg.data.empty() ? make_synthetic_corpus(cfg.seed)
                              : open_token_file(cfg.data, cfg.seq_len, cfg.val_fraction, cfg.seed);
  DTRAIN_CHECK(src->vocab_needed() <= cfg.vocab, Errc::invalid_config,
               "--vocab " << cfg.vocab << " is too small for " << src->describe()
                          << ", which needs at least " << src->vocab_needed());
  return src;
}

optim::AdamWConfig adamw_config(const TrainConfig& cfg) {
  optim::AdamWConfig a;
  a.beta1 = static_cast<float>(cfg.beta1);
  a.beta2 = static_cast<float>(cfg.beta2);
  a.eps = static_cast<float>(cfg.eps);
  a.weight_decay = static_cast<float>(cfg.weight_decay);
  return a;
}

// This rank's pipeline stage: its layer chunks (chunk c = piece c*pp + stage), the
// embedding / head at the ends, and as many activation slots as the schedule keeps in flight.
std::vector<GptStage> model_chunks(const TrainConfig& cfg, const ProcessGrid& grid,
                                   int world_size) {
  if (cfg.pp == 1) return {GptStage{}};
  const int V = cfg.virtual_stages, s = grid.pp_rank();
  const auto split = parallel::partition_layers(
      cfg.layers, cfg.pp * V, parallel::parse_pipeline_layers(cfg.pipeline_layers));
  const std::vector<int> slots =
      parallel::chunk_slots(parallel::parse_schedule_kind(cfg.schedule), cfg.pp, s,
                            cfg.accum_steps(world_size), V);
  std::vector<GptStage> chunks;
  for (int c = 0; c < V; ++c) {
    const parallel::LayerRange r = split[static_cast<std::size_t>(c * cfg.pp + s)];
    chunks.push_back({r.first, r.count, grid.is_first_stage() && c == 0,
                      grid.is_last_stage() && c == V - 1, slots[static_cast<std::size_t>(c)]});
  }
  return chunks;
}

BatchPlan batch_plan(const TrainConfig& cfg, const ProcessGrid& grid, int world_size) {
  BatchPlan p;
  p.micro_batch = cfg.micro_batch;
  p.dp_size = grid.dp_size();
  p.dp_rank = grid.dp_rank();
  p.accum_steps = cfg.accum_steps(world_size);
  return p;
}

}  // namespace

Trainer::State::State(const TrainConfig& c, Communicator& w)
    : cfg(validated(c, w.size())),
      world(w),
      grid(w, grid_shape(cfg)),
      dev(configured_device(cfg.device, w, cfg.deterministic)),
      source(open_source(cfg)),
      // ZeRO 3 writes only the parameter pieces this rank keeps, once they are known.
      model(model_config(cfg), dev, cfg.seed, cfg.micro_batch, model_chunks(cfg, grid, w.size()),
            &grid.tp(), cfg.sequence_parallel,
            cfg.zero == 3 ? GptModel::Weights::deferred : GptModel::Weights::init),
      optimizer(dev, optimizer_segments(), model.parameters().numel(), adamw_config(cfg)),
      loader(*source, batch_plan(cfg, grid, w.size()), cfg.seq_len),
      tokens(sizeof(std::int32_t) * cfg.micro_batch * cfg.seq_len),
      targets(sizeof(std::int32_t) * cfg.micro_batch * cfg.seq_len) {
  schedule.lr = cfg.lr;
  schedule.min_lr = cfg.min_lr;
  schedule.warmup_steps = cfg.warmup_steps;
  schedule.total_steps = std::max(1L, cfg.steps);
  schedule.validate();
  if (gather) model.init_weights(cfg.seed, &gather->owned());
  if (sync || gather) {  // collectives in flight move on while a block computes
    model.set_progress_hook([this] {
      if (sync) sync->poll();
      if (gather) gather->poll();
    });
  }
  low = precision_format(cfg.precision);
  scaler = make_loss_scaler(cfg);
  if (low != DType::f32) {
    // fp32 masters of this rank's segments; the arena (what every pass reads) gets them
    // rounded, and ZeRO 1/2 share the rounded pieces.
    optimizer.use_master_weights(model.parameters().params(), low);
    share_updated_parameters();
  }
  if (w.rank() == 0 && !cfg.metrics.empty()) metrics.open(cfg.metrics);
  micro_losses.resize(static_cast<std::size_t>(accum()));
  if (grid.pp_size() > 1) {
    pipeline = std::make_unique<parallel::PipelineExecutor>(
        model, grid.pp(), parallel::parse_schedule_kind(cfg.schedule), accum(), cfg.micro_batch,
        cfg.seq_len, cfg.virtual_stages);
  }
  losses.reserve(static_cast<std::size_t>(std::max(0L, cfg.steps)));  // no growth in the loop

  // Held between steps: ZeRO 2 keeps only this rank's gradient pieces, ZeRO 3 also only its
  // parameter pieces (docs/data-parallel.md: the transient units during a pass come on top).
  const std::size_t n = model.parameters().numel();
  const bool sharded_grads = cfg.zero >= 2;
  const std::size_t owned = sync ? sync->owned_numel() : fixed_order->owned_numel();
  memory.params = (gather ? gather->owned_numel() : n) * sizeof(float);
  memory.grads = (sharded_grads ? owned : n) * sizeof(float) +
                 (fixed_order ? fixed_order->bytes() : 0);
  memory.optimizer = optimizer.state_bytes();
  memory.activations = model.activation_bytes() + (pipeline ? pipeline->buffer_bytes() : 0);
  memory_per_rank.resize(w.size());
  std::uint64_t mine[4] = {memory.params, memory.grads, memory.optimizer, memory.activations};
  std::vector<std::uint64_t> all(4 * static_cast<std::size_t>(w.size()));
  w.all_gather(mine, all.data(), 4, DType::i64);
  for (int r = 0; r < w.size(); ++r) {
    memory_per_rank[r] = {all[4 * r], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]};
  }
  double peak = measure_peak_flops(dev);
  w.all_reduce(&peak, &peak, 1, DType::f64, ReduceOp::avg);
  peak_flops_per_rank = peak;
  plan_norm_segments();
}

// Called while constructing `optimizer`: sets up the gradient reduction first, because under
// ZeRO the optimiser updates only the pieces of the arena this rank owns.
std::vector<optim::Segment> Trainer::State::optimizer_segments() {
  ParameterStore& params = model.parameters();
  Communicator& dp = grid.dp();
  const BatchPlan plan = batch_plan(cfg, grid, world.size());
  if (cfg.deterministic) {
    // One unit, the whole arena; under ZeRO 3 the model's units, as parameters are gathered.
    std::vector<parallel::Range> units{{0, params.numel()}};
    if (cfg.zero == 3) {
      units.clear();
      for (const parallel::Bucket& b : parallel::plan_buckets(model.grad_ready_ranges(), 0))
        units.push_back({b.first, b.last});
    }
    std::vector<std::vector<std::size_t>> counts;
    for (std::size_t u = 0; u < units.size(); ++u)
      counts.push_back(parallel::shard_piece_counts(units[u].second - units[u].first, dp.size(), u));
    fixed_order = std::make_unique<parallel::FixedOrderSum>(dev, dp, units, counts, plan.accum_steps);
    if (cfg.zero == 3) {
      shard_parameters(std::make_unique<parallel::ParamGather>(dp, dev, params.params(), units, counts));
    }
    std::vector<bool> counted;
    for (const ParamInfo& p : params) counted.push_back(counts_in_norm(p));
    fixed_norm = std::make_unique<parallel::FixedOrderNorm>(dev, dp, params, std::move(counted));
    whole_arena = {{0, params.numel()}};
    if (cfg.zero == 0) return parallel::parameter_segments(params);
    return parallel::owned_segments(params, fixed_order->owned());
  }
  const auto mode = cfg.zero >= 2   ? parallel::GradReduction::shard
                   : cfg.zero == 1 ? parallel::GradReduction::reduce_scatter
                                   : parallel::GradReduction::all_reduce;
  // ZeRO 3 gathers parameters unit by unit: one bucket per unit, so the gradient pieces a
  // rank owns are exactly its parameter pieces.
  const std::size_t bucket_bytes =
      cfg.zero == 3 ? 0 : static_cast<std::size_t>(cfg.bucket_mb * 1024 * 1024);
  sync = std::make_unique<parallel::GradientSync>(dp, params.grads(), model.grad_ready_ranges(),
                                                  bucket_bytes, mode, &dev);
  parallel::GradientSync* s = sync.get();
  model.set_grad_ready_hook([s](std::size_t first, std::size_t last) { s->ready(first, last); });
  if (cfg.zero == 3) shard_parameters(parallel::gather_by_bucket(dp, dev, params.params(), *sync));
  if (mode == parallel::GradReduction::all_reduce) return parallel::parameter_segments(params);
  return parallel::owned_segments(params, sync->owned());
}

// ZeRO 3: keep only this rank's piece of every unit; the model's passes gather units as
// they use them.
void Trainer::State::shard_parameters(std::unique_ptr<parallel::ParamGather> g_owner) {
  gather = std::move(g_owner);
  parallel::ParamGather* g = gather.get();
  model.set_param_use_hooks({[g](int unit, int next) { g->acquire(unit, next); },
                             [g](int unit) { g->release(unit); }});
}

// Global gradient norm over everything the model holds across TP and (ZeRO) DP ranks, the
// same as a single rank's. A parameter replicated over the TP group counts once.
double Trainer::State::gradient_norm() {
  const ParameterStore& params = model.parameters();
  if (fixed_norm) {
    const bool all = fixed_order_whole();
    double sq = fixed_norm->sum_squares(params.grads(), all ? whole_arena : fixed_order->owned(), all);
    if (grid.tp_size() > 1) grid.tp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
    if (grid.pp_size() > 1) grid.pp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
    return std::sqrt(sq);
  }
  if (cfg.zero == 0) {
    double sq = nn::grad_sum_squares(params, dev, &grid.tp());
    if (grid.pp_size() > 1) {
      sq -= duplicate_wte_squares();
      grid.pp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
    }
    return std::sqrt(sq);
  }
  double local = 0;
  const std::vector<optim::Segment>& segs = optimizer.segments();
  for (std::size_t i = 0; i < segs.size(); ++i) {
    if (segment_in_norm[i]) {
      local += dev.sum_squares(params.grads() + segs[i].offset, static_cast<std::int64_t>(segs[i].numel));
    }
  }
  grid.dp().all_reduce(&local, &local, 1, DType::f64, ReduceOp::sum);
  if (grid.tp_size() > 1) grid.tp().all_reduce(&local, &local, 1, DType::f64, ReduceOp::sum);
  if (grid.pp_size() > 1) grid.pp().all_reduce(&local, &local, 1, DType::f64, ReduceOp::sum);
  return std::sqrt(local);
}

// Whether a parameter's gradient counts toward the global norm on this rank, when norms
// are summed over TP and PP ranks: one replicated over the TP group counts on TP rank 0
// only, and the last stage's copy of a tied wte not at all (the first stage counts it).
bool Trainer::State::counts_in_norm(const ParamInfo& p) const {
  const bool skip_wte = grid.pp_size() > 1 && grid.is_last_stage() && cfg.tie_embeddings;
  return (p.tp_sharded || grid.tp_rank() == 0) && !(skip_wte && p.name == "wte");
}

// ZeRO 1-3: which owned optimiser segments count toward the global norm.
void Trainer::State::plan_norm_segments() {
  if (cfg.zero == 0 || cfg.deterministic) return;
  for (const optim::Segment& seg : optimizer.segments()) {
    bool counted = true;
    for (const ParamInfo& p : model.parameters()) {
      if (seg.offset >= p.offset && seg.offset < p.offset + p.numel) counted = counts_in_norm(p);
    }
    segment_in_norm.push_back(counted);
  }
}

// Loads one micro-batch of `split` into the reused token buffers and runs the forward pass.
double Trainer::State::forward_micro(Split split, std::uint64_t first_sample) {
  loader.load(split, first_sample, tokens.as<std::int32_t>(), targets.as<std::int32_t>());
  return model.forward(tokens.as<std::int32_t>(), targets.as<std::int32_t>(), cfg.micro_batch,
                       cfg.seq_len);
}

// Mean of the micro-batch losses of a step over the whole global batch.
double Trainer::State::average_over_dp(double loss_sum, int n_micro) {
  double loss = loss_sum / n_micro;
  if (grid.dp_size() > 1) grid.dp().all_reduce(&loss, &loss, 1, DType::f64, ReduceOp::avg);
  return loss;
}

// Sum of squares (over the TP group) of the last stage's copy of a tied wte, which the
// first stage already counts; 0 elsewhere.
double Trainer::State::duplicate_wte_squares() {
  if (!(grid.is_last_stage() && cfg.tie_embeddings)) return 0;
  ParameterStore& params = model.parameters();
  const ParamInfo& w = params.at("wte");
  double sq = dev.sum_squares(params.grad(w), static_cast<std::int64_t>(w.numel));
  if (grid.tp_size() > 1) grid.tp().all_reduce(&sq, &sq, 1, DType::f64, ReduceOp::sum);
  return sq;
}

// Tied embeddings: the first stage's wte and the last stage's copy get the sum of both
// gradients, so the two stay identical after the update.
void Trainer::State::reduce_tied_embedding() {
  if (grid.pp_size() == 1 || !cfg.tie_embeddings || !grid.in_embedding_group()) return;
  ParameterStore& params = model.parameters();
  const ParamInfo& w = params.at("wte");
  grid.embedding().all_reduce(params.grad(w), params.grad(w), w.numel, DType::f32, ReduceOp::sum);
}

// --pp > 1: the schedule runs every micro-batch of the step; then the tied embedding copies
// are summed and the data-parallel reduction runs over the stage's arena (not overlapped
// with backward: the embedding sum must come first, ZeRO-1 shards differ per stage).
double Trainer::State::sync_gradients_pipeline() {
  model.parameters().zero_grads();
  const int n_micro = accum();
  sync->begin(false);  // the backward hooks only accumulate
  double loss = run_pipeline(seed(1.0f / static_cast<float>(n_micro)), {});
  reduce_tied_embedding();
  sync->begin(grid.dp_size() > 1);
  sync->finish();  // launches every bucket
  loss = average_over_dp(loss, n_micro);
  grid.pp().broadcast(&loss, &loss, 1, DType::f64, grid.pp_size() - 1);  // the last stage's
  return loss;
}

// The step's micro-batches through the pipeline schedule (sum of their losses on the last
// stage), and the bubble timers of the steps after the first (which pays one-time costs).
double Trainer::State::run_pipeline(float dloss,
                                    const parallel::PipelineExecutor::BackwardDone& done) {
  const long s = step;
  const double loss = pipeline->run_step(
      [this, s](int mb, std::int32_t* tok, std::int32_t* tgt) {
        loader.load(Split::train, loader.plan().first_sample(s, mb), tok, tgt);
      },
      dloss, done);
  busy_last = pipeline->last_step_seconds() - pipeline->last_idle_seconds();
  span_last = pipeline->last_step_seconds();
  grid.pp().all_reduce(&span_last, &span_last, 1, DType::f64, ReduceOp::max);
  if (step > start_step) {
    busy_sum += busy_last;
    span_sum += span_last;
  }
  return loss;
}

// --pp > 1 with --deterministic: a stage's backwards run in micro-batch order, so each
// micro-batch's gradient joins the fixed-order sum over the data-parallel group as its
// backward ends; then the tied embedding copies are summed (a sum of two: order-free).
double Trainer::State::sync_gradients_pipeline_fixed_order() {
  ParameterStore& params = model.parameters();
  const int n_micro = accum();
  params.zero_grads();
  run_pipeline(seed(1.0f / static_cast<float>(n_micro * grid.dp_size())), [this, &params](int mb) {
    fixed_order->add(mb, params.grads());
    params.zero_grads();
  });
  finish_fixed_order_sum();
  reduce_tied_embedding();
  double loss = fixed_order->sum_losses(pipeline->last_losses().data()) / (n_micro * grid.dp_size());
  grid.pp().broadcast(&loss, &loss, 1, DType::f64, grid.pp_size() - 1);  // the last stage's
  return loss;
}

// Rank 0 logs every stage's measured bubble, the share of the pipeline step's makespan it
// spent not computing (blocked on messages, or done and waiting for the slowest stage), for
// the last step or (whole_run) the steps after the first, next to the theory. Collective
// over the pipeline group.
void Trainer::State::log_pipeline_bubble(bool whole_run) {
  const double busy = whole_run ? busy_sum : busy_last;
  const double span = whole_run ? span_sum : span_last;
  const double mine = span > 0 ? 1 - busy / span : 0;
  stage_bubbles.resize(static_cast<std::size_t>(grid.pp_size()));
  grid.pp().all_gather(&mine, stage_bubbles.data(), 1, DType::f64);
  if (world.rank() != 0) return;
  std::string bubbles;
  char buf[32];
  for (double b : stage_bubbles) {
    std::snprintf(buf, sizeof buf, " %.3f", b);
    bubbles += buf;
  }
  const auto kind = parallel::parse_schedule_kind(cfg.schedule);
  DTRAIN_LOG(info, "pipeline: " << cfg.schedule << " bubble (idle / makespan) per stage"
                   << (whole_run ? " over the steps after the first:" : ":") << bubbles
                   << "; theory " << parallel::bubble_fraction(kind, grid.pp_size(), accum(),
                                                               cfg.virtual_stages)
                   << "; makespan " << span << " s" << (whole_run ? " in all" : ""));
}

// Forward/backward of every micro-batch, reducing buckets as backward produces them on the
// last micro-step. Returns the step's mean loss over the global batch.
double Trainer::State::sync_gradients_bucketed() {
  if (pipeline) return sync_gradients_pipeline();
  const int n_micro = accum();
  // ZeRO 2/3 hold no full gradient between micro-steps, so each one is reduced into the
  // pieces; otherwise only the last micro-step communicates.
  const bool every_micro = sync->mode() == parallel::GradReduction::shard;
  sync->zero_grads();
  double loss = 0;
  for (int micro = 0; micro < n_micro; ++micro) {
    const bool last = micro == n_micro - 1;
    loss += forward_micro(Split::train, loader.plan().first_sample(step, micro));
    sync->begin(grid.dp_size() > 1 && (last || every_micro), last);
    model.backward(seed(1.0f / static_cast<float>(n_micro)));
    sync->finish();
  }
  return average_over_dp(loss, n_micro);
}

// --deterministic: each micro-batch's gradient alone, then the fixed-order sum.
double Trainer::State::sync_gradients_fixed_order() {
  if (pipeline) return sync_gradients_pipeline_fixed_order();
  ParameterStore& params = model.parameters();
  const int n_micro = accum();
  const float dloss = seed(1.0f / static_cast<float>(n_micro * grid.dp_size()));
  for (int micro = 0; micro < n_micro; ++micro) {
    clear_gradients(micro == 0);
    micro_losses[micro] = forward_micro(Split::train, loader.plan().first_sample(step, micro));
    model.backward(dloss);
    fixed_order->add(micro, params.grads());
  }
  finish_fixed_order_sum();
  return fixed_order->sum_losses(micro_losses.data()) / (n_micro * grid.dp_size());
}

// --deterministic: zeroes the gradient arena for the next micro-batch. Between steps ZeRO
// 2/3 hold only their pieces (the rest was handed back), so at a step's first micro-batch
// the arena is handed back whole (its pages read as zeros when backward touches them);
// later micro-batches find it resident and zero it in place.
void Trainer::State::clear_gradients(bool hand_back) {
  ParameterStore& params = model.parameters();
  if (cfg.zero >= 2 && hand_back) {
    dev.discard(params.grads(), params.numel() * sizeof(float));
  } else {
    params.zero_grads();
  }
}

// --deterministic, after the last micro-batch: the sum lands in the whole arena, or in
// this rank's pieces only (the rest is never read: the optimiser updates the pieces).
void Trainer::State::finish_fixed_order_sum() {
  float* grads = model.parameters().grads();
  if (fixed_order_whole()) {
    fixed_order->sum(grads);
    return;
  }
  if (cfg.zero >= 2) clear_gradients(true);  // all but the pieces handed back
  fixed_order->sum_owned(grads);
}

// ZeRO 1/2: every rank's updated pieces to all. ZeRO 3 keeps the pieces; passes gather them.
void Trainer::State::share_updated_parameters() {
  if (gather || cfg.zero == 0) return;
  float* params = model.parameters().params();
  if (sync) {
    sync->all_gather(params);
  } else {
    fixed_order->all_gather(params);
  }
}

// fp16: whether this step's update is to be applied. Every rank checks the gradients it
// holds (its optimiser segments), all agree on one flag, and the scaler decides from it:
// skip and halve, or apply (and maybe grow). An overflow at the minimum scale throws on
// every rank alike. Without loss scaling there is nothing to check.
bool Trainer::State::apply_overflow_check() {
  if (!scaler.enabled()) return true;
  const float* grads = model.parameters().grads();
  const bool overflow = agree_overflow(world, segments_nonfinite(dev, grads, optimizer.segments()));
  const double used = scaler.scale();
  const bool apply = scaler.update(overflow);
  if (!apply && world.rank() == 0) {
    DTRAIN_LOG(warn, "fp16: gradients overflowed at loss scale " << used << ": step " << step + 1
                     << " skipped, loss scale now " << scaler.scale());
  }
  return apply;
}

Trainer::Trainer(const TrainConfig& cfg, Communicator& world)
    : s_(std::make_unique<State>(cfg, world)) {
  const auto& m = s_->model.parameters();
  DTRAIN_LOG(info, "model: GPT layers=" << cfg.layers << " heads=" << cfg.heads << " d-model="
                   << cfg.d_model << " seq-len=" << cfg.seq_len << " vocab=" << cfg.vocab << " ("
                   << m.numel() << " parameters)");
  DTRAIN_LOG(info, "data: " << s_->source->describe());
  DTRAIN_LOG(info, "layout: " << world.size() << " ranks = dp " << s_->grid.dp_size() << " x tp "
                   << s_->grid.tp_size() << " x pp " << s_->grid.pp_size() << "; micro-batch "
                   << cfg.micro_batch << ", global batch " << s_->loader.plan().global_batch()
                   << " sequences (" << s_->accum() << " micro-steps/step), device "
                   << s_->dev.name());
  DTRAIN_LOG(info, "peak: measured SGEMM " << s_->peak_flops_per_rank / 1e9
                   << " GFLOP/s per rank (the MFU denominator)");
  const std::string from = ckpt::resolve_resume(world, cfg.resume, cfg.save_dir);
  if (!from.empty()) load_checkpoint(from);
}

Trainer::~Trainer() = default;

long Trainer::step() const { return s_->step; }
GptModel& Trainer::model() { return s_->model; }
optim::AdamW& Trainer::optimizer() { return s_->optimizer; }
optim::LossScaler& Trainer::loss_scaler() { return s_->scaler; }
ProcessGrid& Trainer::grid() { return s_->grid; }
bool Trainer::optimizer_sharded() const { return s_->cfg.zero >= 1; }

ckpt::Checkpointer& Trainer::State::checkpoints() {
  if (!checkpointer) {
    checkpointer = std::make_unique<ckpt::Checkpointer>(
        grid, model.parameters(), optimizer, cfg.zero >= 1, model.config());
  }
  return *checkpointer;
}

// One all-reduce: a signal seen by any rank stops every rank at the same point.
bool Trainer::State::agree_stop() {
  int flag = stop_requested() != 0 ? 1 : 0;
  world.all_reduce(&flag, &flag, 1, DType::i32, ReduceOp::max);
  stopped = flag != 0;
  return stopped;
}

std::string Trainer::save_checkpoint() {
  State& s = *s_;
  DTRAIN_CHECK(!s.cfg.save_dir.empty(), Errc::invalid_config, "saving a checkpoint needs --save-dir");
  ckpt::CheckpointInfo info;
  info.step = s.step;
  info.consumed_samples = static_cast<std::uint64_t>(s.step) * s.loader.plan().global_batch();
  info.data_position = info.consumed_samples;  // the data order is a function of the sample index
  info.run_config = s.cfg.to_ini();
  if (s.scaler.enabled()) {
    info.loss_scale = s.scaler.scale();
    info.loss_scale_clean_steps = s.scaler.clean_steps_in_a_row();
  }
  Stopwatch watch;
  // Mixed precision: the file holds the fp32 masters as the parameters, so the arena holds
  // them while it is written, and their rounded values again afterwards.
  float* params = s.model.parameters().params();
  s.optimizer.store_master_weights(params);
  if (s.optimizer.has_master_weights()) s.share_updated_parameters();
  auto round_again = [&s, params] {  // also when the save fails and the caller goes on
    if (!s.optimizer.has_master_weights()) return;
    s.optimizer.round_params(params);
    s.share_updated_parameters();
  };
  std::string path;
  try {
    parallel::HeldParameters whole(s.gather.get());  // ZeRO 3: the checkpointer reads whole tensors
    path = s.checkpoints().save(s.cfg.save_dir, info, s.cfg.keep);
  } catch (...) {
    round_again();
    throw;
  }
  round_again();
  s.last_saved_step = s.step;
  DTRAIN_LOG(info, "checkpoint: wrote " << path << " (step " << s.step << ", " << watch.seconds() << " s)");
  return path;
}

void Trainer::load_checkpoint(const std::string& path) {
  State& s = *s_;
  Stopwatch watch;
  ckpt::CheckpointInfo info;
  {
    parallel::HeldParameters whole(s.gather.get());  // ZeRO 3: read whole tensors, keep the pieces after
    info = s.checkpoints().load(path);
  }
  // fp16 goes on from the saved loss scale; a file without one (another precision) leaves
  // --loss-scale.
  if (s.scaler.enabled() && info.loss_scale > 0)
    s.scaler.set_scale(info.loss_scale, info.loss_scale_clean_steps);
  // Mixed precision: the loaded fp32 parameters become the masters; the arena is rounded.
  if (s.optimizer.has_master_weights()) {
    s.optimizer.load_master_weights(s.model.parameters().params());
    s.share_updated_parameters();
  }
  const std::uint64_t expected = static_cast<std::uint64_t>(info.step) * s.loader.plan().global_batch();
  if (info.data_position != expected) {
    DTRAIN_LOG(warn, "checkpoint " << path << " was at sample " << info.data_position
                     << "; with this global batch step " << info.step << " starts at sample " << expected);
  }
  s.step = info.step;
  s.start_step = info.step;
  s.last_saved_step = info.step;
  DTRAIN_LOG(info, "checkpoint: resumed from " << path << " at step " << info.step << " ("
                   << watch.seconds() << " s)");
}
const std::vector<double>& Trainer::loss_history() const { return s_->losses; }

double Trainer::train_step() {
  State& s = *s_;
  ParameterStore& params = s.model.parameters();
  // Gradients averaged over the global batch: identical to one rank training on all of it.
  const double loss = s.fixed_order ? s.sync_gradients_fixed_order() : s.sync_gradients_bucketed();
  s.last_lr = s.schedule.at(s.step);
  s.last_loss_scale = s.scaler.scale();
  const float unscale = s.scaler.inverse_scale();  // of this step's seed (1 unless fp16)
  // Mixed precision: the reduced gradients in the 16-bit format (fp16: beyond 65504 -> inf).
  if (s.low != DType::f32) round_segments(s.dev, params.grads(), s.optimizer.segments(), s.low);
  if (!s.apply_overflow_check()) {
    // Skipped: the batch is consumed and the step counter (hence the LR schedule) moves on;
    // parameters, moments and the optimiser's own step count stay as they were.
    s.last_grad_norm = std::numeric_limits<double>::quiet_NaN();
    ++s.step;
    s.losses.push_back(loss);
    return loss;
  }
  s.last_grad_norm = s.gradient_norm() * static_cast<double>(unscale);
  const float clip = optim::clip_factor(s.last_grad_norm, s.cfg.clip_grad) * unscale;
  s.optimizer.step(params.params(), params.grads(), static_cast<float>(s.last_lr), clip);
  s.share_updated_parameters();
  ++s.step;
  s.losses.push_back(loss);
  return loss;
}

double Trainer::evaluate() {
  State& s = *s_;
  double total = 0;
  int done = 0;
  for (int b = 0; b < s.cfg.eval_batches; ++b, ++done) {
    if (s.watch_stop && s.agree_stop()) break;  // preemption is checked between batches too
    const std::uint64_t first = s.loader.plan().first_sample(b, 0);
    if (s.pipeline) {
      s.loader.load(Split::val, first, s.tokens.as<std::int32_t>(), s.targets.as<std::int32_t>());
      total += s.pipeline->forward_only(s.tokens.as<std::int32_t>(), s.targets.as<std::int32_t>());
    } else {
      total += s.forward_micro(Split::val, first);
    }
  }
  if (s.pipeline) s.grid.pp().broadcast(&total, &total, 1, DType::f64, s.grid.pp_size() - 1);
  total = done > 0 ? total / done : std::numeric_limits<double>::quiet_NaN();
  Communicator& dp = s.grid.dp();
  if (dp.size() > 1) dp.all_reduce(&total, &total, 1, DType::f64, ReduceOp::avg);
  return total;
}

TrainSummary Trainer::run() {
  State& s = *s_;
  TrainSummary sum;
  sum.entropy_rate = s.source->entropy_rate();
  sum.memory = s.memory;
  sum.start_step = s.start_step;
  StopSignalScope signals;  // SIGTERM/SIGUSR1 only set a flag until run() returns
  clear_stop_request();
  s.stopped = false;
  s.watch_stop = true;
  struct Unwatch {
    bool& flag;
    ~Unwatch() { flag = false; }
  } unwatch{s.watch_stop};
  if (s.cfg.eval_only) {
    sum.final_val_loss = evaluate();
    sum.stopped_by_signal = s.stopped;
    DTRAIN_LOG(info, "eval: val loss " << sum.final_val_loss);
    return sum;
  }
  Progress progress(s.cfg.steps, s.tokens_per_step(), s.model.flops_per_token(),
                    s.peak_flops_per_rank * s.world.size(), sum.entropy_rate);
  Stopwatch loop;
  double timed_seconds = 0;  // steps after the first (which pays one-time costs)
  std::uint64_t allocations_before = 0;
  double exposed = 0;
  while (s.step < s.cfg.steps) {
    Stopwatch watch;
    const double waited_before = s.comm_wait_seconds();
    const double loss = train_step();
    const double step_s = watch.seconds();
    if (s.step == s.start_step + 1) {
      allocations_before = AlignedBuffer::allocation_count();
    } else {
      timed_seconds += step_s;
      exposed += s.comm_wait_seconds() - waited_before;
    }
    if (s.agree_stop()) {
      DTRAIN_LOG(info, "signal " << stop_requested() << " received: stopping after step " << s.step);
      sum.final_loss = loss;
      break;
    }

    const bool last = s.step == s.cfg.steps;
    const bool eval_now = last || (s.cfg.eval_every > 0 && s.step % s.cfg.eval_every == 0);
    double val = -1;
    if (eval_now) val = evaluate();
    if (s.stopped) break;
    if (eval_now) sum.final_val_loss = val;
    if (last || s.step % s.cfg.log_every == 0) {
      StepMetrics m = progress.metrics(s.step, loss, val, s.last_lr, s.last_grad_norm, step_s,
                                       loop.seconds());
      m.memory_per_rank = s.memory_per_rank;
      if (s.scaler.enabled()) {
        m.loss_scale = s.last_loss_scale;
        m.skipped_steps = s.scaler.skipped_steps();
      }
      s.metrics.write(m);
      if (s.world.rank() == 0) DTRAIN_LOG(info, progress.line(m, s.memory.total(), loop.seconds()));
      if (s.pipeline) s.log_pipeline_bubble(false);
    }
    sum.final_loss = loss;
    if (s.cfg.save_every > 0 && s.step % s.cfg.save_every == 0) sum.last_checkpoint = save_checkpoint();
  }
  sum.stopped_by_signal = s.stopped;
  if (!s.cfg.save_dir.empty() && s.last_saved_step != s.step) sum.last_checkpoint = save_checkpoint();
  if (s.stopped && s.cfg.save_dir.empty()) {
    DTRAIN_LOG(warn, "stopped by a signal without --save-dir: nothing was saved");
  }
  if (s.pipeline && s.step > s.start_step + 1) s.log_pipeline_bubble(true);
  sum.steps = s.step;
  sum.skipped_steps = s.scaler.skipped_steps();
  sum.seconds = loop.seconds();
  if (s.step > s.start_step + 1) {
    sum.tokens_per_s =
        static_cast<double>(s.tokens_per_step()) * (s.step - s.start_step - 1) / timed_seconds;
    sum.mfu = progress.mfu(sum.tokens_per_s);
    sum.allocations_after_first_step = AlignedBuffer::allocation_count() - allocations_before;
    sum.exposed_comm_seconds = exposed;
    sum.timed_step_seconds = timed_seconds;
    if (s.grid.dp_size() > 1) {
      DTRAIN_LOG(info, "data-parallel communication not hidden by compute: "
                           << 1e3 * exposed / (s.step - s.start_step - 1) << " ms/step, "
                           << 100 * exposed / timed_seconds << "% of the step time");
    }
  }
  DTRAIN_LOG(info, progress.summary(sum.steps, sum.final_loss, sum.final_val_loss, sum.seconds,
                                    sum.tokens_per_s, sum.mfu, s.memory.total()));
  if (s.scaler.enabled()) {
    DTRAIN_LOG(info, "fp16: " << sum.skipped_steps << " of " << sum.steps - sum.start_step
                     << " steps skipped on gradient overflow; loss scale now " << s.scaler.scale());
  }
  const double mib = 1024.0 * 1024.0;
  std::string gathered;  // ZeRO 3 holds whole units on top of its pieces during a pass
  if (s.gather) {
    gathered = ", peak parameters in a pass " +
               std::to_string(static_cast<double>(s.gather->peak_numel() * sizeof(float)) / mib);
  }
  DTRAIN_LOG(info, "memory of rank 0 (MiB): parameters " << s.memory.params / mib << ", gradients "
                   << s.memory.grads / mib << ", optimizer " << s.memory.optimizer / mib
                   << ", activations " << s.memory.activations / mib << gathered);
  return sum;
}

int first_failed_rank(Communicator& world, bool failed) {
  int candidate = failed ? world.rank() : std::numeric_limits<int>::max();
  world.all_reduce(&candidate, &candidate, 1, DType::i32, ReduceOp::min);
  return candidate == std::numeric_limits<int>::max() ? -1 : candidate;
}

}  // namespace dtrain::train
