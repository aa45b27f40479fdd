// Bring your own model: registration and the optimiser step over the program's buffers.
#include "byom.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "agree.hpp"
#include "dtrain/device/device.hpp"
#include "guard.hpp"

using namespace dtrain::capi;

// Over a device handle (dt_comm_device) the program's buffers are GPU memory, and so are the
// arena and the optimiser state; otherwise all of it is host memory.
dt_byom_s::dt_byom_s(dt_comm_s* c, const dt_optimizer_config_t& cfg, dt_grid_s* grid)
    : CommUser(Kind::byom, c),
      grid(grid),
      store(c->device ? *c->device : dtrain::cpu_device()),
      cfg(cfg) {}

dtrain::Communicator& dt_byom_s::everyone() { return grid ? grid->grid.world() : comm->host_comm(); }

dtrain::CopyKind dt_byom_s::program_to_arena() {
  return comm->device ? dtrain::CopyKind::device_to_device : dtrain::CopyKind::host_to_device;
}

dtrain::CopyKind dt_byom_s::arena_to_program() {
  return comm->device ? dtrain::CopyKind::device_to_device : dtrain::CopyKind::device_to_host;
}

void dt_byom_s::close() {
  if (engine) return;
  // Ranks that registered different tensors, or made the byom with different optimizer
  // settings, would reduce mismatched buckets: every rank fails instead (also where only
  // some registered none).
  std::uint64_t h = settings_fingerprint();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const dtrain::ParamInfo& p = store[i];
    h = mix(mix(fnv1a(p.name.data(), p.name.size(), h), p.decay), int(buffers[i].dtype));
    h = mix(h, p.shape.size());
    for (std::int64_t d : p.shape) h = mix(h, d);
    for (std::int64_t d : p.local_shape) h = mix(h, d);
  }
  // Compared over dp, which fails alike; on a grid (where each stage registers its own
  // tensors) agreed over every rank too, which the step's collectives span.
  auto registrations = [&] {
    // Every rank runs every comparison before any fails, so that none is left in one.
    const bool same = same_value(*comm->comm, h);
    const Outcome split = grid ? check_split() : Outcome{};
    if (!same)
      fail(DT_ERR_INVALID_CONFIG, "the byom's registered tensors (names, shapes, dtypes, decay), "
                                  "optimizer settings or loss scaling differ between the ranks of dp: "
                                  "every rank must register the same ones");
    if (buffers.empty()) fail(DT_ERR_INVALID_STATE, "no tensors registered");
    if (split.code != DT_SUCCESS) fail(static_cast<dt_result_t>(split.code), split.message);
  };
  if (grid)
    agreed_checks(everyone(), true, registrations);
  else
    registrations();
  // Whether some rank's step checks fp16 gradients for overflow (a collective over every
  // rank: on a grid the stages may hold different formats).
  int f16 = holds_f16() ? 1 : 0;
  if (grid) everyone().all_reduce(&f16, &f16, 1, dtrain::DType::i32, dtrain::ReduceOp::max);
  any_f16 = f16 != 0;
  // The ranks agree on the engine: where it could not be made on some (memory), none keeps
  // one, so that all try again together at the next call instead of some stepping alone.
  try {
    agreed_checks(everyone(), true, [&] {
      // Allocated by an earlier try whose engine could not be made: closed but stepless.
      if (!store.allocated()) store.allocate();
      std::size_t largest16 = 0;
      for (const Buffers& b : buffers)
        if (b.dtype != dtrain::DType::f32) largest16 = std::max(largest16, b.numel);
      const bool on_cpu = store.device().kind() == dtrain::DeviceKind::cpu;
      if (largest16 > 0 && !on_cpu && compare16.bytes() == 0)
        compare16 = dtrain::DeviceBuffer(store.device(), 2 * largest16 * sizeof(float));
      if (on_cpu)  // allocated here, where running out of memory is agreed, not in a step
        for (Buffers& b : buffers)
          if (b.dtype != dtrain::DType::f32) b.written.resize(b.numel);
      // The program holds whole gradients and hands them over at the step: ZeRO 2 can shard
      // only the reduction and the AdamW state there, which is what ZeRO 1 does.
      dt_optimizer_config_t engine_cfg = cfg;
      engine_cfg.zero_stage = std::min(cfg.zero_stage, 1);
      dtrain::capi::ModelSplit split;  // the program's own tensor and pipeline parallelism
      if (grid && grid->grid.tp_size() > 1) split.tp = &grid->grid.tp();
      if (grid && grid->grid.pp_size() > 1) split.pp = &grid->grid.pp();
      engine = std::make_unique<StepEngine>(*comm->comm, store, engine_cfg, std::vector<dtrain::parallel::Range>{}, split);
      if (initial_loss_scale > 0) {  // the models' dynamic scaling, from the program's scale
        dtrain::optim::LossScalerConfig scaling;
        scaling.initial_scale = initial_loss_scale;
        engine->scaler() = dtrain::optim::LossScaler(scaling);
      }
    });
  } catch (...) {
    engine.reset();
    throw;
  }
}

bool dt_byom_s::program_changed(std::size_t i) {
  dtrain::Device& dev = store.device();
  const Buffers& b = buffers[i];
  if (!b.seeded) return true;
  if (dev.kind() == dtrain::DeviceKind::cpu)  // host memory: compare the words directly
    return std::memcmp(b.param, b.written.data(), b.numel * 2) != 0;
  // On a GPU, with device ops: the program's values minus the rounded masters.
  const auto n = static_cast<std::int64_t>(b.numel);
  float* given = compare16.as<float>();  // the program's values
  float* mine = given + b.numel;         // minus what it was last given
  dev.convert_from_16bit(given, static_cast<const std::uint16_t*>(b.param), n, b.dtype);
  dev.round_to_16bit(mine, store.param(store[i]), n, b.dtype);
  dev.scale(mine, -1.0f, n);
  dev.accumulate(given, mine, n);
  const double difference = dev.sum_squares(given, n);
  if (!std::isnan(difference)) return difference != 0.0;
  // An inf or NaN on either side (inf - inf): compare the words themselves, on the host
  // (rare: a tensor holding non-finite values).
  auto* words = compare16.as<std::uint16_t>();
  dev.convert_to_16bit(words, store.param(store[i]), n, b.dtype);
  std::vector<std::uint16_t> theirs(b.numel), ours(b.numel);
  dev.copy(theirs.data(), b.param, b.numel * 2, dtrain::CopyKind::device_to_host);
  dev.copy(ours.data(), words, b.numel * 2, dtrain::CopyKind::device_to_host);
  return theirs != ours;
}

void dt_byom_s::in_step(Buffers& b) {
  if (store.device().kind() == dtrain::DeviceKind::cpu)
    std::memcpy(b.written.data(), b.param, b.numel * 2);  // sized by close()
  b.seeded = true;
}

std::uint64_t dt_byom_s::settings_fingerprint() const {
  return mix(optimizer_fingerprint(cfg), fnv1a(&initial_loss_scale, sizeof initial_loss_scale));
}

Outcome dt_byom_s::check_split() {
  dtrain::ProcessGrid& g = grid->grid;
  // What is compared, computed (and allocated) before the first collective.
  // Every rank steps alike: the same optimizer settings and loss scaling everywhere.
  const std::uint64_t settings = settings_fingerprint();
  // A TP group holds slices of the same tensors: the same names, formats, whole shapes and
  // slice shapes (so the same split), decay.
  std::uint64_t tensors = dtrain::kFnvOffset;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const dtrain::ParamInfo& p = store[i];
    tensors = mix(mix(fnv1a(p.name.data(), p.name.size(), tensors), p.tp_sharded), p.decay);
    tensors = mix(tensors, int(buffers[i].dtype));
    for (std::int64_t d : p.shape) tensors = mix(tensors, d);
    for (std::int64_t d : p.local_shape) tensors = mix(tensors, d);
  }
  // Names are unique over the stages (a checkpoint holds each once), and none is a group of
  // another stage's ("w" and "w/b": a dataset and a group of the file at once): the hashes of
  // the names (low bit 0) and of their '/'-prefixes (low bit 1), with the name each is from.
  std::vector<std::int64_t> mine;
  std::vector<std::size_t> from;
  const auto add = [&](const std::string& text, std::uint64_t tag, std::size_t i) {
    mine.push_back(static_cast<std::int64_t>((fnv1a(text.data(), text.size()) << 1) | tag));
    from.push_back(i);
  };
  for (std::size_t i = 0; i < store.size(); ++i) {
    const std::string& name = store[i].name;
    add(name, 0, i);
    for (std::size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1))
      add(name.substr(0, slash), 1, i);
  }
  const auto stages = static_cast<std::size_t>(g.pp_size());
  std::vector<std::int64_t> counts(stages);
  std::vector<std::size_t> sizes(stages);

  const bool same_settings = same_value(g.world(), settings);
  const bool same_slices = same_value(g.tp(), tensors);
  const auto count = static_cast<std::int64_t>(mine.size());
  g.pp().all_gather(&count, counts.data(), 1, dtrain::DType::i64);
  std::copy(counts.begin(), counts.end(), sizes.begin());
  // Agreed: a rank out of memory here would leave its stage waiting in all_gather_v.
  std::vector<std::int64_t> names;
  agreed_checks(g.pp(), true, [&] { names.resize(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0})); });
  g.pp().all_gather_v(mine.data(), names.data(), sizes.data(), dtrain::DType::i64);

  if (!same_settings)
    return {DT_ERR_INVALID_CONFIG, "the byom's optimizer settings or loss scaling differ between the ranks of the grid"};
  if (!same_slices)
    return {DT_ERR_INVALID_CONFIG, "the byom's tensors (names, dtypes, whole and slice shapes) differ between "
                                   "the ranks of a TP group: each registers its slice of the same tensors"};
  std::size_t first = 0;
  for (std::size_t s = 0; s < stages; first += sizes[s], ++s) {
    if (static_cast<int>(s) == g.pp_rank()) continue;
    const auto begin = names.begin() + static_cast<std::ptrdiff_t>(first), end = begin + static_cast<std::ptrdiff_t>(sizes[s]);
    std::sort(begin, end);  // searched once for each of this stage's hashes
    const auto theirs = [&](std::int64_t hash) { return std::binary_search(begin, end, hash); };
    const std::string stages_text = std::to_string(g.pp_rank()) + " and " + std::to_string(s);
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const std::string& name = store[from[i]].name;
      if ((mine[i] & 1) == 0 && theirs(mine[i]))
        return {DT_ERR_INVALID_ARGUMENT, "tensor '" + name + "' is registered on pipeline stages " + stages_text +
                                             ": names must be unique over the stages"};
      if (theirs(mine[i] ^ 1))  // a name of one is a prefix of the other's
        return {DT_ERR_INVALID_ARGUMENT, "tensor '" + name + "' (pipeline stages " + stages_text +
                                             ") and a name of the other stage cannot both be saved: one is a "
                                             "'/'-prefix of the other, a dataset and a group of the checkpoint at once"};
    }
  }
  return {};
}

bool dt_byom_s::holds_f16() const {
  return std::any_of(buffers.begin(), buffers.end(),
                     [](const Buffers& b) { return b.dtype == dtrain::DType::f16; });
}

bool dt_byom_s::gradients_overflowed() {
  dtrain::Device& dev = store.device();
  int bad = dev.any_nonfinite(store.grads(), static_cast<std::int64_t>(store.numel())) ? 1 : 0;
  everyone().all_reduce(&bad, &bad, 1, dtrain::DType::i32, dtrain::ReduceOp::max);
  return bad != 0;
}

void dt_byom_s::copy_in(bool with_grads) {
  dtrain::Device& dev = store.device();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const dtrain::ParamInfo& p = store[i];
    const Buffers& b = buffers[i];
    if (b.dtype == dtrain::DType::f32) {
      const std::size_t bytes = b.numel * sizeof(float);
      dev.copy(store.param(p), b.param, bytes, program_to_arena());
      if (with_grads) dev.copy(store.grad(p), b.grad, bytes, program_to_arena());
      continue;
    }
    // Both buffers are the device's memory here (host memory on the CPU).
    const auto n = static_cast<std::int64_t>(b.numel);
    if (program_changed(i)) {
      dev.convert_from_16bit(store.param(p), static_cast<const std::uint16_t*>(b.param), n, b.dtype);
      in_step(buffers[i]);
    }
    if (with_grads)
      dev.convert_from_16bit(store.grad(p), static_cast<const std::uint16_t*>(b.grad), n, b.dtype);
  }
}

void dt_byom_s::copy_out() {
  dtrain::Device& dev = store.device();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    Buffers& b = buffers[i];
    if (b.dtype == dtrain::DType::f32) {
      dev.copy(b.param, store.param(store[i]), b.numel * sizeof(float), arena_to_program());
      continue;
    }
    dev.convert_to_16bit(static_cast<std::uint16_t*>(b.param), store.param(store[i]),
                         static_cast<std::int64_t>(b.numel), b.dtype);
    in_step(b);
  }
  // Copies within a GPU are queued on dtrain's stream, and the program's kernels run on its
  // own: the parameters must be in its buffers when the call returns.
  if (comm->device) dev.synchronize();
}

Checkpoints& dt_byom_s::checkpoint_io() {
  close();
  if (checkpoints) return *checkpoints;
  // Made together: a rank that fails after the making's collectives (allocating its plans)
  // fails every rank instead of leaving them in the first save or load.
  // Kept only once every rank has made it (as the model's, models.cpp).
  std::unique_ptr<Checkpoints> made;
  agreed_checks(everyone(), true, [&] {
    if (grid)  // every stage writes its tensors, the TP slices whole
      made = std::make_unique<Checkpoints>(grid->grid, store, *engine, Checkpoints::Owner::byom, nullptr);
    else
      made = std::make_unique<Checkpoints>(*comm->comm, store, *engine, Checkpoints::Owner::byom, nullptr);
  });
  checkpoints = std::move(made);
  return *checkpoints;
}

namespace {

// A new byom over dp (of grid, when made on one), after the checks both creations share.
dt_byom_t new_byom(dt_comm_s& dp, const dt_optimizer_config_t* config, dt_byom_t* byom, dt_grid_s* grid) {
  need_ptr(byom, "byom");
  const dt_optimizer_config_t opt = read_optimizer_config(config);
  if (opt.zero_stage == 3)
    fail(DT_ERR_NOT_IMPLEMENTED,
         "zero_stage 3 shards the parameters, but a byom's parameters live in the program's "
         "buffers: use zero_stage 0, 1 or 2 (2 shards as much as 1 here)");
  return user_handle(adopt(std::make_unique<dt_byom_s>(&dp, opt, grid)));
}

// A tensor's buffers overlapping each other or another tensor's (a tied weight registered
// twice, a gradient inside a parameter) were updated twice or read as each other's values.
void check_no_overlap(const dt_byom_s& b, const char* name, const void* param, const void* grad,
                      std::size_t bytes) {
  const auto overlap = [](const void* x, std::size_t nx, const void* y, std::size_t ny) {
    const auto a = reinterpret_cast<std::uintptr_t>(x), c = reinterpret_cast<std::uintptr_t>(y);
    return a < c + ny && c < a + nx;
  };
  if (overlap(param, bytes, grad, bytes))
    fail(DT_ERR_INVALID_ARGUMENT, std::string("the param and grad buffers of '") + name + "' overlap");
  for (std::size_t i = 0; i < b.buffers.size(); ++i) {
    const dt_byom_s::Buffers& other = b.buffers[i];
    const std::size_t n = other.numel * dtrain::dtype_size(other.dtype);
    if (overlap(param, bytes, other.param, n) || overlap(param, bytes, other.grad, n) ||
        overlap(grad, bytes, other.param, n) || overlap(grad, bytes, other.grad, n))
      fail(DT_ERR_INVALID_ARGUMENT, std::string("the buffers of '") + name + "' overlap those of '" +
                                        b.store[i].name + "' (register a tensor used twice, a tied weight, once)");
  }
}

}  // namespace

extern "C" {

dt_result_t dt_byom_create(dt_comm_t dp, const dt_optimizer_config_t* config, dt_byom_t* byom) {
  clear_output(byom);
  return call<dt_comm_s>(__func__, dp, Kind::comm, "dp", [&](dt_comm_s& c) {
    *byom = new_byom(c, config, byom, nullptr);
  });
}

dt_result_t dt_byom_create_grid(dt_grid_t grid, const dt_optimizer_config_t* config, dt_byom_t* byom) {
  clear_output(byom);
  return call<dt_grid_s>(__func__, grid, Kind::grid, "grid", [&](dt_grid_s& g) {
    *byom = new_byom(*g.comms[DT_GROUP_DP], config, byom, &g);
  });
}

dt_result_t dt_byom_destroy(dt_byom_t byom) {
  return with_byom(__func__, byom, [](dt_byom_s& b) { release_child(&b); });
}

dt_result_t dt_byom_register(dt_byom_t byom, const char* name, int ndim, const int64_t* shape,
                             dt_dtype_t dtype, void* param, const void* grad, unsigned flags) {
  return with_byom(__func__, byom, [&](dt_byom_s& b) {
    if (b.engine || b.store.allocated())
      fail(DT_ERR_INVALID_STATE, "tensors can only be registered before the first step or checkpoint");
    need_ptr(name, "name");
    need(ndim >= 1 && ndim <= 8, "ndim must be in [1, 8]");
    need_ptr(shape, "shape");
    need_ptr(param, "param");
    need_ptr(grad, "grad");
    need((flags & ~(DT_PARAM_NO_DECAY | DT_PARAM_TP_ROWS | DT_PARAM_TP_COLS)) == 0u, "unknown flags");
    need((flags & DT_PARAM_TP_ROWS) == 0u || (flags & DT_PARAM_TP_COLS) == 0u,
         "flags: DT_PARAM_TP_ROWS and DT_PARAM_TP_COLS exclude each other");
    if (dtype < DT_F32 || dtype > DT_U8)
      fail(DT_ERR_INVALID_ARGUMENT, "unknown dtype " + std::to_string(static_cast<int>(dtype)));
    if (dtype != DT_F32 && dtype != DT_BF16 && dtype != DT_F16)
      fail(DT_ERR_NOT_IMPLEMENTED, "only DT_F32, DT_BF16 and DT_F16 tensors can be registered "
                                   "(parameters and gradients of one format)");
    std::vector<std::int64_t> dims(shape, shape + ndim);
    // Far beyond any memory, and small enough that byte counts and offsets never wrap.
    constexpr std::size_t kMaxNumel = (std::size_t{1} << 60) / sizeof(float);
    std::size_t numel = 1;
    for (std::int64_t d : dims) {
      need(d > 0, "every extent of shape must be positive");
      need(static_cast<std::size_t>(d) <= kMaxNumel / numel,
           "shape has too many elements (more than 2^58)");
      numel *= static_cast<std::size_t>(d);
    }
    std::size_t total = numel;
    for (const auto& buf : b.buffers) total += buf.numel;
    need(total <= kMaxNumel, "the registered tensors have too many elements (more than 2^58)");
    // This rank's slice of a tensor split over the TP group: the tensor is tp slices long
    // along the split dimension, this rank's the tp_rank-th.
    std::vector<std::int64_t> whole = dims, at(dims.size(), 0);
    const int tp = b.grid ? b.grid->grid.tp_size() : 1;
    const bool split = (flags & (DT_PARAM_TP_ROWS | DT_PARAM_TP_COLS)) != 0u;
    if (split) {
      const std::size_t d = (flags & DT_PARAM_TP_ROWS) ? 0 : dims.size() - 1;
      need(static_cast<std::size_t>(tp) <= kMaxNumel / total,
           "the registered tensors, whole, have too many elements (more than 2^58)");
      whole[d] *= tp;
      at[d] = dims[d] * (b.grid ? b.grid->grid.tp_rank() : 0);
    }
    const dtrain::DType format = dtype == DT_BF16 ? dtrain::DType::bf16
                                 : dtype == DT_F16  ? dtrain::DType::f16
                                                    : dtrain::DType::f32;
    b.store.check_new_name(name);  // the name's mistakes first
    check_no_overlap(b, name, param, grad, numel * dtrain::dtype_size(format));
    // Room first: the push below must not fail once the store holds the tensor.
    if (b.buffers.size() == b.buffers.capacity()) b.buffers.reserve(std::max<std::size_t>(8, 2 * b.buffers.size()));
    b.store.add_slice(name, whole, dims, at, (flags & DT_PARAM_NO_DECAY) == 0u, split && tp > 1);
    b.buffers.push_back({param, grad, numel, format, false, {}});
  });
}

dt_result_t dt_byom_step(dt_byom_t byom, float lr, float* grad_norm) {
  return with_byom(__func__, byom, [&](dt_byom_s& b) {
    // Collective over dp (on a grid its world): a bad lr on some ranks fails them all.
    agreed_checks(b.everyone(), true, [&] { need(lr >= 0 && lr < 1e30f, "lr must be a finite value >= 0"); });
    need_same_lr(b.everyone(), lr);
    b.close();
    b.copy_in(true);
    // Overflowed fp16 gradients: the step is skipped on every rank rather than turning the
    // parameters and AdamW's moments into NaN (a scaling engine checks and backs off itself).
    if (!b.engine->scaler().enabled() && b.any_f16 && b.gradients_overflowed()) {
      ++b.skipped;
      if (grad_norm) *grad_norm = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    const long taken = b.engine->steps();
    const double norm = b.engine->step(lr);
    if (b.engine->steps() == taken) ++b.skipped;  // the scaler skipped it
    b.copy_out();
    if (grad_norm) *grad_norm = static_cast<float>(norm);
  });
}

dt_result_t dt_byom_scale_loss(dt_byom_t byom, float initial_scale) {
  return with_byom(__func__, byom, [&](dt_byom_s& b) {
    if (b.engine || b.store.allocated())
      fail(DT_ERR_INVALID_STATE, "loss scaling can only be turned on before the first step or checkpoint");
    const dtrain::optim::LossScalerConfig defaults;
    need(initial_scale == 0 || (initial_scale >= defaults.min_scale && initial_scale <= defaults.max_scale),
         "initial_scale must be 0 (65536) or in [1, 16777216]");
    b.initial_loss_scale = initial_scale == 0 ? static_cast<float>(defaults.initial_scale) : initial_scale;
  });
}

dt_result_t dt_byom_loss_scale(dt_byom_t byom, float* scale, long* skipped) {
  return with_byom(__func__, byom, [&](dt_byom_s& b) {
    if (scale) *scale = b.engine ? b.engine->loss_scale() : std::max(1.0f, b.initial_loss_scale);
    if (skipped) *skipped = b.skipped;
  });
}

dt_result_t dt_byom_steps(dt_byom_t byom, long* steps) {
  return with_byom(__func__, byom, [&](dt_byom_s& b) {
    need_ptr(steps, "steps");
    *steps = b.engine ? b.engine->steps() : 0;
  });
}

}  // extern "C"
