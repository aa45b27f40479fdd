// The Trainer's construction: layout, device, data, model, the gradient reduction and ZeRO
// partition the optimiser is built on, and which gradients count toward the global norm.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <iterator>

#include "dtrain/comm/agreed_failure.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/parallel/cpu_threads.hpp"
#include "dtrain/parallel/device_world.hpp"
#include "dtrain/parallel/pipeline_partition.hpp"
#include "dtrain/train/same_settings.hpp"
#include "train/host_memory.hpp"
#include "train/save_dir.hpp"
#include "train/trainer_state.hpp"

namespace dtrain::train {

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
  // mixed precision keeps them 16-bit unless asked not to
  m.saved_activations = cfg.fp32_activations ? DType::f32 : precision_format(cfg.precision);
  m.recompute = cfg.recompute;
  m.validate();
  return m;
}

const TrainConfig& validated(const TrainConfig& cfg, Communicator& world) {
  agree_same_settings(cfg.all_settings_ini(), world);  // first: the checks below assume one config for all
  cfg.validate(world.size());
  return cfg;
}

// The device for cfg, the same kind on every rank, with its kernel/BLAS threads per rank
// (threads_per_rank). GEMM operands in the precision's format: set for every Trainer, since
// the device is the process's and outlives it.
Device& configured_device(const TrainConfig& cfg, Communicator& world) {
  Device& dev = parallel::agreed_device(cfg.device, world, "--device");
  dev.set_gemm_operand_format(precision_format(cfg.precision));
  parallel::CpuThreads t = parallel::threads_per_rank(world);
  if (cfg.deterministic) {  // reductions inside kernels must not depend on threads
    t.threads = 1;
    t.why = "--deterministic";
  }
  dev.set_num_threads(t.threads);
  if (dev.kind() == DeviceKind::cpu && world.rank() == 0)
    DTRAIN_LOG(info, "threads: " << t.threads << " per rank (" << t.why << ")");
  return dev;
}

std::unique_ptr<TokenSource> open_source(const TrainConfig& cfg) {
  if (cfg.data.empty()) return make_synthetic_corpus(cfg.seed);
  const std::vector<std::string> val =
      cfg.val_data.empty() ? std::vector<std::string>{} : expand_data_files(cfg.val_data);
  return open_token_files(expand_data_files(cfg.data), val, cfg.seq_len, cfg.val_fraction, cfg.seed);
}

// Runs f, which may fail on some ranks only (a file read, memory), and agrees on the outcome
// over the world before the next collective: every rank throws the same AgreedError.
template <class F>
void agreed(Communicator& world, const char* what, F&& f) {
  LocalFailure failure;
  try {
    f();
  } catch (const std::exception& e) {
    failure.record(e);
  }
  failure.agree(world, what);
}

// Every rank opens the data itself, and on a cluster each node may see its own copy (data
// staged to node-local disks): a file that only some ranks can open fails every rank, and
// ranks that see different files, sizes (the description names them) or contents (sampled by
// the fingerprint) fail together too, instead of training on different data. The ranks read a share of the files each to find
// the largest token id.
std::unique_ptr<TokenSource> open_source_on_every_rank(const TrainConfig& cfg, Communicator& world) {
  std::unique_ptr<TokenSource> src;
  agreed(world, "opening the data", [&] { src = open_source(cfg); });
  const std::string seen = src->describe();
  const std::uint64_t content = src->fingerprint();
  std::int64_t hash[2] = {
      static_cast<std::int64_t>(std::hash<std::string>{}(seen) ^ (content * 0x9e3779b97f4a7c15ULL)), 0};
  hash[1] = hash[0];
  world.all_reduce(&hash[0], &hash[0], 1, DType::i64, ReduceOp::min);
  world.all_reduce(&hash[1], &hash[1], 1, DType::i64, ReduceOp::max);
  DTRAIN_CHECK(hash[0] == hash[1], Errc::invalid_config,
               "the ranks see different data (every node must see the same files with the same "
               "contents); rank " << world.rank() << " sees " << seen << ", content fingerprint "
                                  << std::hex << content);
  int needed = 0;
  agreed(world, "reading the data", [&] { needed = src->vocab_needed(world.rank(), world.size()); });
  world.all_reduce(&needed, &needed, 1, DType::i32, ReduceOp::max);
  DTRAIN_CHECK(needed <= cfg.vocab, Errc::invalid_config,
               "--vocab " << cfg.vocab << " is too small for the data, which needs at least " << needed
                          << " (the data: " << seen << ")");
  src->limit_vocab(cfg.vocab);
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

// body runs on rank 0 only (files only rank 0 touches); when it throws, every rank throws
// the same error, so that none is left waiting in the next collective.
void on_root_for_all(Communicator& world, const std::function<void()>& body) {
  LocalFailure f;
  if (world.rank() == 0) {
    try {
      body();
    } catch (const std::exception& e) {
      f.record(e);
    }
  }
  f.agree(world);
}

// Whether discard hands memory back on every rank (the CPU; a GPU with virtual memory
// management). Collective over the world.
bool every_rank_releases_memory(const Device& dev, Communicator& world) {
  std::int32_t releases = dev.discard_releases_memory() ? 1 : 0;
  world.all_reduce(&releases, &releases, 1, DType::i32, ReduceOp::min);
  return releases != 0;
}

// 16-bit parameter storage (docs/mixed-precision.md): mixed precision at ZeRO 0-2 (ZeRO 3
// keeps only its pieces already) where the device can hand back part of the arena. It saves 2
// bytes a parameter and costs the widening and remapping around each pass (15% of a GPT-2
// 124M step on an H200), so --param-storage auto takes it only where the whole fp32 arena
// would take more than an eighth of the free memory on some rank. Collective over the world:
// every rank must decide alike, even where one's GPU lacks virtual memory management.
constexpr std::size_t kArenaShareOfFreeMemory = 8;

bool chooses_16bit_storage(const TrainConfig& cfg, const Device& dev, Communicator& world,
                           bool memory_released_everywhere) {
  const bool f32 = precision_format(cfg.precision) == DType::f32;
  if (f32 || cfg.zero == 3 || cfg.param_storage == "fp32") {
    if (cfg.param_storage == "16bit" && world.rank() == 0) {
      DTRAIN_LOG(warn, "--param-storage 16bit has no effect "
                           << (f32 ? "with --precision fp32 (no 16-bit parameters)"
                                   : "with --zero 3 (each rank keeps only its fp32 pieces)"));
    }
    return false;
  }
  if (!memory_released_everywhere) {
    if (cfg.param_storage == "16bit" && world.rank() == 0) {
      DTRAIN_LOG(warn, "--param-storage 16bit: the parameters stay in the fp32 arena, since "
                 "some rank's device cannot hand back part of an allocation (a GPU needs "
                 "virtual memory management; see DTRAIN_CUDA_VMM), so the words would add "
                 "memory instead of saving it");
    }
    return false;
  }
  if (cfg.param_storage == "16bit") return true;
  const std::size_t arena = sizeof(float) * model_config(cfg).parameter_count();
  std::int32_t fits = arena <= dev.available_memory() / kArenaShareOfFreeMemory ? 1 : 0;
  world.all_reduce(&fits, &fits, 1, DType::i32, ReduceOp::min);
  return fits == 0;
}

// What the model writes when it is built: nothing where set-up writes the pieces itself
// (ZeRO 3 its own, 16-bit storage one unit at a time, --init-from the file's values, which
// would replace the seed's), and ZeRO 2 holds no gradients yet.
GptModel::Weights initial_weights(const TrainConfig& cfg, bool stores_16bit) {
  if (cfg.zero == 3 || stores_16bit || !cfg.init_from.empty()) return GptModel::Weights::deferred;
  return cfg.zero == 2 ? GptModel::Weights::init_grads_deferred : GptModel::Weights::init;
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
    : cfg(validated(c, w)),
      world(w),
      dev(configured_device(cfg, w)),
      // On a GPU, gradients, parameters and activations are device buffers: the grid's
      // groups are split from a world that moves them over a device transport.
      device_world(parallel::device_world(w, dev, "world.device")),
      grid(device_world.valid() ? device_world : w, grid_shape(cfg)),
      source(open_source_on_every_rank(cfg, w)),
      data_fingerprint(source->fingerprint()),
      memory_released_everywhere(every_rank_releases_memory(dev, w)),
      stores_16bit(chooses_16bit_storage(cfg, dev, w, memory_released_everywhere)),
      // ZeRO 2 holds only the gradient pieces this rank owns, ZeRO 3 also writes only its
      // parameter pieces, once they are known (hold_own_pieces); 16-bit storage writes its
      // parameters unit by unit (pack_parameters).
      model(model_config(cfg), dev, cfg.seed, cfg.micro_batch, model_chunks(cfg, grid, w.size()),
            &grid.tp(), cfg.sequence_parallel, initial_weights(cfg, stores_16bit)),
      optimizer(dev, optimizer_segments(), model.parameters().numel(), adamw_config(cfg)),
      loader(*source, batch_plan(cfg, grid, w.size()), cfg.seq_len),
      tokens(sizeof(std::int32_t) * cfg.micro_batch * cfg.seq_len),
      targets(sizeof(std::int32_t) * cfg.micro_batch * cfg.seq_len) {
  schedule.lr = cfg.lr;
  schedule.min_lr = cfg.min_lr;
  schedule.warmup_steps = cfg.warmup_steps;
  schedule.total_steps = std::max(1L, cfg.steps);
  schedule.validate();
  resume_from = ckpt::resolve_resume(world, cfg.resume, cfg.save_dir);
  if (!cfg.init_from.empty()) open_initial_weights();
  if (cfg.zero >= 2) hold_own_pieces();
  if (sync || gather) {  // collectives in flight move on while a block computes
    model.set_progress_hook([this] {
      if (sync) sync->poll();
      if (gather) gather->poll();
    });
  }
  low = precision_format(cfg.precision);
  scaler = make_loss_scaler(cfg);
  if (stores_16bit) {
    pack_parameters();
  } else if (low != DType::f32) {
    // fp32 masters of this rank's segments; the arena (what every pass reads) gets them
    // rounded, and ZeRO 1/2 share the rounded pieces.
    optimizer.use_master_weights(model.parameters().params(), low);
    share_updated_parameters();
    if (gather) gather->set_wire(low);  // ZeRO 3 gathers the rounded pieces as 16-bit words
  }
  initial.reset();  // every parameter is written
  on_root_for_all(w, [this] {  // rank 0 writes both
    // Kept once set up; --eval-only logs no step, so it makes no file.
    if (!cfg.metrics.empty() && !cfg.eval_only) {
      if (!cfg.save_dir.empty()) check_metrics_path(cfg.metrics, cfg.save_dir);
      metrics.open(cfg.metrics, /*provisional=*/true);
    }
    if (!cfg.save_dir.empty() && !cfg.eval_only) {
      ckpt::Checkpointer::check_directory_path(cfg.save_dir, world.size());  // before making it
      check_save_dir(cfg.save_dir);
    } else if (!cfg.save_dir.empty()) {  // only read: a file there would mean fresh weights
      std::error_code ec;
      const auto status = std::filesystem::status(cfg.save_dir, ec);
      DTRAIN_CHECK(!std::filesystem::exists(status) || std::filesystem::is_directory(status),
                   Errc::invalid_config, "--save-dir '" << cfg.save_dir << "' is not a directory");
    }
  });
  if (!cfg.save_dir.empty() && !cfg.eval_only) {
    checkpoints().claim(cfg.save_dir);  // a second run into it fails now, not at a save
    check_save_dir_shared(w, cfg.save_dir);
  }
  if (cfg.deterministic && grid.pp_size() == 1) micro_losses.resize(static_cast<std::size_t>(accum()));
  if (grid.pp_size() > 1) {
    pipeline = std::make_unique<parallel::PipelineExecutor>(
        model, grid.pp(), parallel::parse_schedule_kind(cfg.schedule), accum(), cfg.micro_batch,
        cfg.seq_len, cfg.virtual_stages);
  }
  // No growth in the loop for runs up to 2^20 steps (8 MiB; --steps may be 2^31 - 1, whose
  // 16 GiB would fail a small model's set-up), then a doubling now and then.
  losses.reserve(static_cast<std::size_t>(std::clamp(cfg.steps, 0L, 1L << 20)));

  // Held between steps: ZeRO 2 keeps only this rank's gradient pieces, ZeRO 3 also only its
  // parameter pieces (docs/data-parallel.md: the transient units during a pass come on top),
  // where the device can hand back the rest of the arenas (the CPU; a GPU with virtual
  // memory management).
  const std::size_t n = model.parameters().numel();
  const bool released = dev.discard_releases_memory();
  const bool sharded_grads = cfg.zero >= 2 && released;
  const std::size_t owned = sync ? sync->owned_numel() : fixed_order->owned_numel();
  memory.params = packed ? packed->bytes()
                         : (gather && released ? gather->owned_numel() : n) * sizeof(float);
  if (cfg.zero >= 2 && !memory_released_everywhere && w.rank() == 0) {
    DTRAIN_LOG(warn, "ZeRO " << cfg.zero << " shards the optimizer state and the "
               "communication, but where a rank's device cannot hand back part of an "
               "allocation (a GPU needs virtual memory management; see DTRAIN_CUDA_VMM), that "
               "rank keeps the whole parameter and gradient arenas resident");
  }
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
  // Most of it is not touched yet (activations and optimizer state fault in at the first
  // step): a node or cgroup without room for it fails now, with a message. A GPU's memory is
  // its allocator's to refuse.
  // An evaluation alone is counted alike: it holds the same buffers, and a checkpoint load
  // writes the optimizer state too.
  if (dev.kind() == DeviceKind::cpu)
    check_host_memory(w, memory.params + memory.grads + memory.optimizer + memory.activations);
  // A known peak (a data-sheet figure, say) replaces the measurement and its start-up time,
  // on every rank alike (one rank's figure averaged with the others' measurements would be
  // neither).
  const double given = env::params().peak_flops;
  double extremes[2] = {given, -given};
  w.all_reduce(extremes, extremes, 2, DType::f64, ReduceOp::min);
  DTRAIN_CHECK(extremes[0] == -extremes[1], Errc::invalid_config,
               "DTRAIN_PEAK_FLOPS differs between ranks (from " << extremes[0] << " to " << -extremes[1]
                   << "; 0: not set, measured): set it for every rank or none");
  peak_flops_given = given > 0;
  double peak = peak_flops_given ? given : measure_peak_flops(dev);
  w.all_reduce(&peak, &peak, 1, DType::f64, ReduceOp::avg);
  peak_flops_per_rank = peak;
  plan_norm_runs();
  release_spare_memory();  // what ZeRO 2/3 or 16-bit storage dropped while setting up
}

void Trainer::State::release_spare_memory() {
  dev.synchronize();  // queued work no longer uses what was dropped
  dev.trim_memory(Device::Trim::all);
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
    whole_arena_segments = parallel::parameter_segments(params);
    if (cfg.zero == 0) return whole_arena_segments;
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
  model.set_grad_write_hook([s](std::size_t first, std::size_t last) { s->writing(first, last); });
  if (cfg.zero == 3) shard_parameters(parallel::gather_by_bucket(dp, dev, params.params(), *sync));
  if (mode == parallel::GradReduction::all_reduce) return parallel::parameter_segments(params);
  return parallel::owned_segments(params, sync->owned());
}

// ZeRO 2/3 built the model holding nothing of its gradient arena, ZeRO 3 nothing of its
// parameter arena either (GptModel::Weights): hold this rank's gradient pieces (what the
// reduction sums into) and ZeRO 3's parameter pieces, and write only those parameters, so
// no rank ever holds all the gradients or the whole model.
void Trainer::State::hold_own_pieces() {
  ParameterStore& params = model.parameters();
  const std::vector<parallel::Range>& grad_pieces = sync ? sync->owned() : fixed_order->owned();
  for (const parallel::Range& r : grad_pieces)
    dev.restore(params.grads() + r.first, sizeof(float) * (r.second - r.first));
  if (!gather) return;
  agreed(world, "writing the first parameters", [&] {
    for (const parallel::Range& r : gather->owned())
      dev.restore(params.params() + r.first, sizeof(float) * (r.second - r.first));
    init_weights(&gather->owned());
  });
}

// --init-from: the file is opened and the shapes of the tensors this rank holds are checked,
// agreed over the world; each tensor is read (and its values checked) when written, inside
// an agreement too. A run that resumes a checkpoint does not read the file. The model was
// built holding nothing: ZeRO 3 and 16-bit storage write their pieces later (init_weights),
// the others hold here what the model would have held when built, the parameter arena and
// below ZeRO 2 the gradients.
void Trainer::State::open_initial_weights() {
  if (!resume_from.empty()) {
    DTRAIN_LOG(info, "init: --init-from '" << cfg.init_from << "' is not read: the run resumes from "
                     << resume_from);
  } else {
    agreed(world, "reading --init-from", [&] {
      initial = std::make_unique<ckpt::InitialWeights>(cfg.init_from, model.config());
      initial->check_shapes(model.parameters());
    });
    DTRAIN_LOG(info, "init: weights from " << initial->describe());
    // No shape shows the head count: a forgotten --heads would load and compute another model.
    if (!initial->records_heads() && cfg.d_model % 64 == 0 && cfg.d_model != 64 * cfg.heads)
      DTRAIN_LOG(warn, "--init-from '" << cfg.init_from << "' does not record its head count (no config.json "
                       "beside it): --heads " << cfg.heads << " is taken as given; GPT-2's models have heads of "
                       "size 64, which would be --heads " << cfg.d_model / 64);
  }
  if (cfg.zero == 3 || stores_16bit) return;
  ParameterStore& params = model.parameters();
  agreed(world, "writing the first parameters", [&] {
    dev.restore(params.params(), params.bytes());
    if (cfg.zero < 2) dev.restore(params.grads(), params.bytes());
    init_weights(nullptr);
  });
}

// The parameters' first values inside `only` (null: all): from --init-from's file, else
// GPT-2's initialisation from the seed.
void Trainer::State::init_weights(const ParameterStore::ArenaRanges* only) {
  if (!initial) {
    model.init_weights(cfg.seed, only);
    return;
  }
  ParameterStore& params = model.parameters();
  for (const ParamInfo& p : params) {
    const bool touched = !only || std::any_of(only->begin(), only->end(), [&](const auto& r) {
      return std::max(r.first, p.offset) < std::min(r.second, p.offset + p.local_numel());
    });
    if (touched) params.set_values(p, initial->values(p), only);
  }
}

// ZeRO 3: keep only this rank's piece of every unit; the model's passes gather units as
// they use them.
void Trainer::State::shard_parameters(std::unique_ptr<parallel::ParamGather> g_owner) {
  gather = std::move(g_owner);
  use_parameters_by_unit(*gather);
}

// Mixed precision: the arena holds exact 16-bit values (the masters rounded); keep them as
// 16-bit words, which the optimiser updates, and widen each unit around its use.
// 16-bit storage, set up without ever holding the whole fp32 arena: unit by unit the arena
// range is restored, initialised, its segments' values become the fp32 masters, and the
// words get them rounded before the range is discarded again. Every rank initialises every
// unit alike (values are keyed by logical element), so the words need no sharing. ZeRO 0/1
// hold the whole gradient arena, which the deferred model left empty.
void Trainer::State::pack_parameters() {
  ParameterStore& params = model.parameters();
  if (cfg.zero < 2) dev.restore(params.grads(), params.bytes());
  optimizer.use_master_weights(low);
  const std::vector<parallel::Range>& units = model.grad_ready_ranges();
  packed = std::make_unique<parallel::PackedParameters>(dev, params.params(), params.numel(), units,
                                                        low, /*arena_holds_values=*/false);
  agreed(world, "writing the first parameters", [&] {
    for (std::size_t u = 0; u < units.size(); ++u) {
      const ParameterStore::ArenaRanges unit{units[u]};
      dev.restore(params.params() + unit[0].first, sizeof(float) * (unit[0].second - unit[0].first));
      init_weights(&unit);
      optimizer.take_master_weights(params.params(), unit[0].first, unit[0].second);
      packed->pack_unit(static_cast<int>(u));
    }
  });
  optimizer.write_params_as_16bit(packed->words());
  use_parameters_by_unit(*packed);
}

void Trainer::State::use_parameters_by_unit(parallel::ParamResidency& r) {
  parallel::ParamResidency* p = &r;
  model.set_param_use_hooks({[p](int unit, int next) { p->acquire(unit, next); },
                             [p](int unit) { p->release(unit); }});
}

void Trainer::State::check_not_held(const char* what) const {
  const parallel::ParamResidency* r = residency();
  DTRAIN_CHECK(!r || !r->held_whole(), Errc::invalid_argument,
               what << " inside a Trainer::whole_parameters() scope: the held parameters would "
                    "not follow the change; end the scope first");
}

std::optional<parallel::HeldParameters> Trainer::State::hold_parameters_if_they_fit() {
  if (!packed) return std::nullopt;
  std::int32_t fits = model.parameters().bytes() <= dev.available_memory() / 2 ? 1 : 0;
  world.all_reduce(&fits, &fits, 1, DType::i32, ReduceOp::min);
  if (!fits) return std::nullopt;
  return std::optional<parallel::HeldParameters>(std::in_place, packed.get());
}

std::size_t Trainer::State::peak_param_bytes() const {
  if (gather) return gather->peak_numel() * sizeof(float);
  return packed ? packed->bytes() + packed->peak_numel() * sizeof(float) : 0;
}

void Trainer::State::count_param_peaks() {
  std::uint64_t mine = std::max<std::uint64_t>(memory.params, residency() ? peak_param_bytes() : 0);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world.size()));
  world.all_gather(&mine, all.data(), 1, DType::i64);
  for (std::size_t r = 0; r < all.size(); ++r) memory_per_rank[r].params = all[r];
}

// Whether a parameter's gradient counts toward the global norm on this rank, when norms
// are summed over TP and PP ranks: one replicated over the TP group counts on TP rank 0
// only, and the last stage's copy of a tied wte not at all (the first stage counts it).
bool Trainer::State::counts_in_norm(const ParamInfo& p) const {
  const bool skip_wte = grid.pp_size() > 1 && grid.is_last_stage() && cfg.tie_embeddings;
  return (p.tp_sharded || grid.tp_rank() == 0) && !(skip_wte && p.name == "wte");
}

// The optimiser's segments (every tensor at ZeRO 0, the owned pieces at ZeRO 1-3) that count
// toward the global norm: a TP-replicated tensor on TP rank 0 only, a pipeline's second copy
// of a tied wte not at all.
void Trainer::State::plan_norm_runs() {
  if (cfg.deterministic) return;
  // The tensors by offset, each segment's found by binary search: a scan of all tensors per
  // segment took most of the set-up of a model with thousands of layers.
  std::vector<const ParamInfo*> by_offset;
  for (const ParamInfo& p : model.parameters())
    if (p.numel > 0) by_offset.push_back(&p);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const ParamInfo* a, const ParamInfo* b) { return a->offset < b->offset; });
  for (const optim::Segment& seg : optimizer.segments()) {
    const auto after = std::upper_bound(
        by_offset.begin(), by_offset.end(), seg.offset,
        [](std::size_t offset, const ParamInfo* p) { return offset < p->offset; });
    bool counted = true;
    if (after != by_offset.begin()) {
      const ParamInfo& p = **std::prev(after);
      if (seg.offset < p.offset + p.numel) counted = counts_in_norm(p);
    }
    if (!counted) continue;
    norm_starts.push_back(static_cast<std::int64_t>(seg.offset));
    norm_lengths.push_back(static_cast<std::int64_t>(seg.numel));
  }
  norm_sums.resize(norm_starts.size());
}

}  // namespace dtrain::train
