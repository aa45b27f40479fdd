// Built-in models (MLP, GPT) with their optimiser step.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/device/device.hpp"
#include "dtrain/nn/tensor_parallel.hpp"
#include "dtrain/parallel/device_world.hpp"
#include "agree.hpp"
#include "guard.hpp"
#include "model.hpp"
#include "pipeline_config.hpp"

using namespace dtrain::capi;

void dtrain::capi::need_same_inputs(dt_model_s& m, std::uint64_t hash, const char* what,
                                    bool collective_over_dp, bool pass) {
  dtrain::Communicator* same = m.callers(false, pass);
  if (!same) return;
  std::int64_t lo = static_cast<std::int64_t>(hash), hi = lo;
  same->all_reduce(&lo, &lo, 1, dtrain::DType::i64, dtrain::ReduceOp::min);
  same->all_reduce(&hi, &hi, 1, dtrain::DType::i64, dtrain::ReduceOp::max);
  const int here = lo != hi ? 1 : 0;
  int anywhere = here;
  m.callers(collective_over_dp, pass)->all_reduce(&here, &anywhere, 1, dtrain::DType::i32, dtrain::ReduceOp::max);
  if (!anywhere) return;
  const std::string ranks = same == m.tp() ? "TP group" : "model replica (its TP groups on every pipeline stage)";
  fail(DT_ERR_INVALID_ARGUMENT,
       here ? "the ranks of this rank's " + ranks + " were given different " + what +
                  "; they compute one model and need the same ones"
            : "the ranks of another " + ranks + " were given different " + what);
}

Checkpoints& dt_model_s::checkpoint_io() {
  if (checkpoints) return *checkpoints;
  const dtrain::GptConfig* g = gpt ? &gpt->config() : nullptr;
  const Checkpoints::Owner owner = gpt ? Checkpoints::Owner::gpt : Checkpoints::Owner::mlp;
  // Made together: a rank that fails after the making's collectives (allocating its plans)
  // fails every rank instead of leaving them in the first save or load.
  // Kept only once every rank has made it: a rank that kept its own would skip the making's
  // collectives at the next call, where the others run them again.
  std::unique_ptr<Checkpoints> made;
  agreed_checks(group(), true, [&] {
    if (layout)
      made = std::make_unique<Checkpoints>(*layout, params(), *engine, owner, g);
    else
      made = std::make_unique<Checkpoints>(dp(), params(), *engine, owner, g);
  });
  checkpoints = std::move(made);
  return *checkpoints;
}

namespace {

dtrain::MlpModel& need_mlp(dt_model_s& m) {
  if (!m.mlp) fail(DT_ERR_INVALID_ARGUMENT, "model is not an MLP");
  return *m.mlp;
}

dtrain::GptModel& need_gpt(dt_model_s& m) {
  if (!m.gpt) fail(DT_ERR_INVALID_ARGUMENT, "model is not a GPT");
  return *m.gpt;
}

void need_struct(const void* cfg, std::size_t struct_size, std::size_t v1_size, const char* init) {
  need_ptr(cfg, "config");
  if (struct_size < v1_size)
    fail(DT_ERR_INVALID_ARGUMENT, std::string("config->struct_size is too small: initialise it with ") + init);
}

// Replicas must start identical, or data parallelism silently trains different models; and
// ranks made with different shapes, schedules, ZeRO stages or buckets would wait for each
// other in mismatched collectives. `settings`: a fingerprint of everything but the seed.
void need_agreement(dtrain::Communicator& ranks, std::uint64_t seed, std::uint64_t settings) {
  need_same_value(ranks, seed, "config->seed differs between the ranks of the model");
  need_same_value(ranks, settings, "the model's settings (config or optimizer) differ between its "
                                   "ranks: every rank must pass the same ones");
}


// Builds a model's parts (allocation only, no communication) on every rank of c: where one
// rank runs out of memory, every rank fails with its message instead of waiting for it in
// the model's first collective.
template <class F>
void allocate_agreed(dt_comm_s& c, F&& build) {
  agreed_checks(*c.comm, true, std::forward<F>(build));
}

// The device config->device names, agreed by every rank of dp (older callers, whose struct
// ends before the field, keep the CPU they had), and the group its buffers move over. On
// the CPU the process's kernels and OpenBLAS then run the rank's share of threads.
template <class Config>
dtrain::Device& open_device(const Config* config, dt_model_s& m) {
  std::string which = "cpu";
  if (covers(config, offsetof(Config, device), sizeof(const char*)))
    which = config->device ? config->device : "auto";
  dtrain::Communicator& dp = m.comm->host_comm();  // a device handle's routing is made anew
  dtrain::Device& dev = dtrain::parallel::agreed_device(which, dp, "config->device");
  if (dev.kind() == dtrain::DeviceKind::cpu) dev.set_num_threads(m.ctx->cpu_threads.threads);
  m.device_group = dtrain::parallel::device_world(dp, dev, dp.name() + ".device");
  return dev;
}

// GPT inputs are indices into tables: check them before any kernel reads out of bounds.
void need_tokens(const std::int32_t* t, std::size_t n, int vocab, const char* name) {
  need_ptr(t, name);
  for (std::size_t i = 0; i < n; ++i)
    if (t[i] < 0 || t[i] >= vocab)
      fail(DT_ERR_INVALID_ARGUMENT, std::string(name) + "[" + std::to_string(i) + "] = " +
                                        std::to_string(t[i]) + " is outside [0, vocab)");
}

// The sequences of one forward pass through the model: the batch, or under pipeline
// parallelism one of its micro-batches (checked to be whole and at most max_batch).
int pass_batch(dt_model_s& m, dtrain::GptModel& g, int batch) {
  if (!m.pipeline) {
    need(batch >= 1 && batch <= g.max_batch(), "batch must be in [1, max_batch]");
    return batch;
  }
  const int M = m.micro_batches;
  if (batch < M || batch % M != 0 || batch / M > g.max_batch())
    fail(DT_ERR_INVALID_ARGUMENT, "under pipeline parallelism batch must be micro_batches (" +
                                      std::to_string(M) + ") x 1..max_batch (" +
                                      std::to_string(g.max_batch()) + ") sequences, got " +
                                      std::to_string(batch));
  return batch / M;
}

// A GPT pass's arguments, checked by every rank alike where the pass is collective: over dp
// (ZeRO), or over the model's replica (TP, PP). Returns the sequences of one forward pass.
int need_gpt_inputs(dt_model_s& m, const int32_t* tokens, const int32_t* targets, int batch,
                    int seq, bool collective_over_dp, const float* out = nullptr,
                    const char* out_name = nullptr) {
  dtrain::GptModel& g = need_gpt(m);
  const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);
  int per_pass = 0;
  agreed_model_checks(m, collective_over_dp, [&] {
    if (out_name) need_ptr(out, out_name);
    per_pass = pass_batch(m, g, batch);
    need(seq >= 1 && seq <= g.config().seq_len, "seq must be in [1, seq_len]");
    if (g.sequence_parallel() && (static_cast<long>(per_pass) * seq) % m.tp()->size() != 0)
      fail(DT_ERR_INVALID_ARGUMENT, std::string("with sequence_parallel, ") +
                                        (m.pipeline ? "a micro-batch's" : "batch *") +
                                        " seq must be divisible by the grid's tp (" +
                                        std::to_string(m.tp()->size()) + ")");
    need_tokens(tokens, n, g.config().vocab, "tokens");
    need_tokens(targets, n, g.config().vocab, "targets");
  }, true);
  const std::size_t bytes = n * sizeof(int32_t);
  const std::uint64_t shape = mix(mix(fnv1a(tokens, bytes), batch), seq);
  need_same_inputs(m, fnv1a(targets, bytes, shape), "tokens", collective_over_dp, true);
  return per_pass;
}

// Under pipeline parallelism: the micro-batches of [batch, seq] tokens through the stages,
// forward and backward (gradients accumulate, seeded with seed / micro_batches), or forward
// only. Returns the mean loss over the batch, the last stage's, on every stage.
float pipeline_pass(dt_model_s& m, const int32_t* tokens, const int32_t* targets, int per_pass,
                    int seq, bool backward, float seed) {
  dtrain::parallel::PipelineExecutor& pipe = *m.pipeline;
  pipe.use_shape(per_pass, seq);
  const std::size_t micro = static_cast<std::size_t>(per_pass) * static_cast<std::size_t>(seq);
  double sum = 0;
  if (backward) {
    sum = pipe.run_step(
        [&](int mb, std::int32_t* tok, std::int32_t* tgt) {
          std::memcpy(tok, tokens + mb * micro, micro * sizeof(std::int32_t));
          std::memcpy(tgt, targets + mb * micro, micro * sizeof(std::int32_t));
        },
        seed / static_cast<float>(m.micro_batches));
  } else {
    for (int mb = 0; mb < m.micro_batches; ++mb)
      sum += pipe.forward_only(tokens + mb * micro, targets + mb * micro);
  }
  double loss = sum / m.micro_batches;
  dtrain::Communicator& pp = *m.pp();
  pp.broadcast(&loss, &loss, 1, dtrain::DType::f64, pp.size() - 1);
  return static_cast<float>(loss);
}

// An MLP pass's arguments (labels may be NULL for predict), as need_gpt_inputs: agreed by
// every rank of the model where the call is collective over dp, else by the TP group, whose
// ranks must pass the same inputs.
void need_mlp_inputs(dt_model_s& m, const float* x, const int32_t* labels, bool with_labels,
                     int batch, bool collective_over_dp, const float* out = nullptr,
                     const char* out_name = nullptr) {
  dtrain::MlpModel& mlp = need_mlp(m);
  agreed_model_checks(m, collective_over_dp, [&] {
    if (out_name) need_ptr(out, out_name);
    need_ptr(x, "x");
    need(batch >= 1 && batch <= mlp.max_batch(), "batch must be in [1, max_batch]");
    if (with_labels) need_ptr(labels, "labels");
    mlp.check_inputs(with_labels ? labels : nullptr, batch);
  }, true);
  if (!m.tp()) return;
  const std::size_t n = static_cast<std::size_t>(batch);
  std::uint64_t inputs = mix(fnv1a(x, n * static_cast<std::size_t>(mlp.config().sizes[0]) * sizeof(float)), batch);
  if (with_labels) inputs = fnv1a(labels, n * sizeof(int32_t), inputs);
  need_same_inputs(m, inputs, "inputs", collective_over_dp, true);
}

// The engine reduces gradient ranges as backward finishes them (ZeRO 2/3) and, under
// ZeRO 3, gathers each parameter unit while a pass uses it.
void connect_hooks(dtrain::GptModel& g, StepEngine& e) {
  g.set_grad_ready_hook([&e](std::size_t first, std::size_t last) { e.ready(first, last); });
  g.set_grad_write_hook([&e](std::size_t first, std::size_t last) { e.writing(first, last); });
  g.set_progress_hook([&e] { e.poll(); });
  if (dtrain::parallel::ParamGather* pg = e.gather())
    g.set_param_use_hooks({[pg](int unit, int next) { pg->acquire(unit, next); },
                           [pg](int unit) { pg->release(unit); }});
}

// config->precision as the 16-bit format of mixed precision, f32 for none (also for NULL
// and for older callers, whose struct ends before the field).
template <class Config>
dtrain::DType precision_of(const Config* config) {
  const bool has_field = covers(config, offsetof(Config, precision), sizeof(const char*));
  const std::string p = has_field && config->precision ? config->precision : "fp32";
  if (p == "fp32") return dtrain::DType::f32;
  if (p == "bf16") return dtrain::DType::bf16;
  if (p == "fp16") return dtrain::DType::f16;
  fail(DT_ERR_INVALID_CONFIG, "config->precision must be fp32, bf16 or fp16, got '" + p + "'");
}

// How m is split besides dp, for its step: the TP group, the pipeline, and the first and
// last stage when both hold the tied embedding.
ModelSplit split_of(dt_model_s& m, bool tied) {
  ModelSplit split{m.tp(), m.pp(), nullptr};
  if (split.pp && tied && m.layout->in_embedding_group()) split.tied = &m.layout->embedding();
  return split;
}

// A model made on a grid: its own TP, PP and DP groups (over the device transport where the
// model lives on a GPU) and, under pipeline parallelism, its replica.
void lay_out(dt_model_s& m, dt_grid_s& grid) {
  dtrain::Communicator& world = m.device_group.valid() ? m.device_group : grid.grid.world();
  m.layout = std::make_unique<dtrain::ProcessGrid>(world, grid.grid.shape());
  if (grid.grid.pp_size() > 1)
    m.replica = world.split(m.layout->dp_rank(), world.rank(), world.name() + ".replica");
}

// A GPT over `c` (the dp group), or over grid (c: its world): the checks of its settings,
// every rank agreeing on the device, the layout, the model, its step engine.
void create_gpt(dt_comm_s& c, dt_grid_s* grid, const dt_gpt_config_t* config,
                const dt_optimizer_config_t* optimizer, dt_model_t* model) {
  const int tp = grid ? grid->grid.tp_size() : 1, pp = grid ? grid->grid.pp_size() : 1;
  dt_optimizer_config_t opt{};
  dtrain::GptConfig gc;
  bool sp = false;
  PipelineSettings stages;
  dtrain::DType low = dtrain::DType::f32;
  // Every rank checks its own arguments, and one rank's refusal fails them all (rather than
  // leaving the others in the agreement below).
  agreed_checks(*c.comm, true, [&] {
    need_ptr(model, "model");
    need_struct(config, config ? config->struct_size : 0,
                offsetof(dt_gpt_config_t, seed) + sizeof(uint64_t), "DT_GPT_CONFIG_INIT");
    opt = read_optimizer_config(optimizer);
    gc.layers = config->layers;
    gc.heads = config->heads;
    gc.d_model = config->d_model;
    gc.seq_len = config->seq_len;
    gc.vocab = config->vocab;
    gc.tie_embeddings = config->tie_embeddings != 0;
    if (covers(config, offsetof(dt_gpt_config_t, recompute), sizeof(int))) gc.recompute = config->recompute != 0;
    gc.validate();
    need(config->max_batch >= 1, "config->max_batch must be positive");
    sp = covers(config, offsetof(dt_gpt_config_t, sequence_parallel), sizeof(int)) &&
         config->sequence_parallel != 0;
    stages = pipeline_settings(config, pp);
    if (pp > 1 && opt.zero_stage >= 2)
      fail(DT_ERR_NOT_IMPLEMENTED, "optimizer zero_stage " + std::to_string(opt.zero_stage) +
                                       " with pipeline parallelism (pp > 1) is not available: ZeRO 2 "
                                       "and 3 reduce every backward, a pipeline's come from several "
                                       "micro-batches at once; use zero_stage 0 or 1");
    if (sp && tp == 1)
      fail(DT_ERR_INVALID_CONFIG, "config->sequence_parallel needs tensor parallelism: "
                                  "dt_model_create_gpt_grid on a grid with tp > 1");
    gc.validate_tp(tp, sp);
    low = precision_of(config);
  });
  gc.saved_activations = low;  // 16-bit saved activations, as dtrain-gpt keeps them
  std::uint64_t settings = optimizer_fingerprint(opt);
  for (int v : {gc.layers, gc.heads, gc.d_model, gc.seq_len, gc.vocab, int(gc.tie_embeddings),
                int(gc.recompute), int(sp), int(low), int(stages.schedule), stages.micro_batches,
                stages.virtual_stages})
    settings = mix(settings, v);
  for (int count : stages.layer_counts) settings = mix(settings, count);
  need_agreement(*c.comm, config->seed, settings);
  auto m = std::make_unique<dt_model_s>(&c);
  dtrain::Device& dev = open_device(config, *m);
  m->precision = low;
  dev.set_gemm_operand_format(low);  // the model sizes its saved activations by it
  if (grid) lay_out(*m, *grid);
  allocate_agreed(c, [&] {
    m->gpt = std::make_unique<dtrain::GptModel>(gc, dev, config->seed, config->max_batch,
                                                stage_chunks(gc, m->layout.get(), stages), m->tp(), sp);
    if (pp > 1) {
      m->micro_batches = stages.micro_batches;
      m->pipeline = std::make_unique<dtrain::parallel::PipelineExecutor>(
          *m->gpt, *m->pp(), stages.schedule, stages.micro_batches, config->max_batch, gc.seq_len,
          stages.virtual_stages);
    }
    const ModelSplit split = split_of(*m, gc.tie_embeddings);
    m->tied = split.tied;
    m->engine = std::make_unique<StepEngine>(m->dp(), m->params(), opt, m->gpt->grad_ready_ranges(),
                                             split, low);
    connect_hooks(*m->gpt, *m->engine);
  });
  *model = user_handle(adopt(std::move(m)));
}

// An MLP over `c` (the dp group), or split over grid's TP group (c: its world), as create_gpt.
void create_mlp(dt_comm_s& c, dt_grid_s* grid, const dt_mlp_config_t* config,
                const dt_optimizer_config_t* optimizer, dt_model_t* model) {
  const int tp = grid ? grid->grid.tp_size() : 1, pp = grid ? grid->grid.pp_size() : 1;
  dt_optimizer_config_t opt{};
  dtrain::MlpConfig mc;
  dtrain::DType low = dtrain::DType::f32;
  // As for the GPT: one rank's refusal fails every rank.
  agreed_checks(*c.comm, true, [&] {
    need_ptr(model, "model");
    need_struct(config, config ? config->struct_size : 0,
                offsetof(dt_mlp_config_t, seed) + sizeof(uint64_t), "DT_MLP_CONFIG_INIT");
    need(config->num_sizes >= 2, "config->num_sizes must be at least 2");
    need_ptr(config->sizes, "config->sizes");
    opt = read_optimizer_config(optimizer);
    mc.sizes.assign(config->sizes, config->sizes + config->num_sizes);
    mc.validate();
    mc.validate_tp(tp);
    need(config->max_batch >= 1, "config->max_batch must be positive");
    low = precision_of(config);
    if (pp > 1)
      fail(DT_ERR_NOT_IMPLEMENTED, "an MLP is not cut into pipeline stages: make it on a grid "
                                   "with pp 1 (tensor and data parallelism)");
  });
  std::uint64_t settings = mix(optimizer_fingerprint(opt), int(low));
  for (int size : mc.sizes) settings = mix(settings, size);
  need_agreement(*c.comm, config->seed, settings);
  auto m = std::make_unique<dt_model_s>(&c);
  dtrain::Device& dev = open_device(config, *m);
  m->precision = low;
  if (grid) lay_out(*m, *grid);
  allocate_agreed(c, [&] {
    m->mlp = std::make_unique<dtrain::MlpModel>(mc, dev, config->seed, config->max_batch, m->tp());
    m->engine = std::make_unique<StepEngine>(m->dp(), m->params(), opt,
                                             std::vector<dtrain::parallel::Range>{},
                                             ModelSplit{m->tp(), nullptr, nullptr}, low);
  });
  // The MLP has no per-layer parameter hooks: under ZeRO 3 each pass holds it whole
  // (WholeParameters in its entry points), and only the pieces stay between passes.
  *model = user_handle(adopt(std::move(m)));
}

}  // namespace

extern "C" {

dt_result_t dt_model_create_mlp(dt_comm_t dp, const dt_mlp_config_t* config,
                                const dt_optimizer_config_t* optimizer, dt_model_t* model) {
  clear_output(model);
  return call<dt_comm_s>(__func__, dp, Kind::comm, "dp", [&](dt_comm_s& c) {
    create_mlp(c, nullptr, config, optimizer, model);
  });
}

dt_result_t dt_model_create_mlp_grid(dt_grid_t grid, const dt_mlp_config_t* config,
                                     const dt_optimizer_config_t* optimizer, dt_model_t* model) {
  clear_output(model);
  return call<dt_grid_s>(__func__, grid, Kind::grid, "grid", [&](dt_grid_s& g) {
    create_mlp(*g.comms[DT_GROUP_WORLD], &g, config, optimizer, model);
  });
}

dt_result_t dt_model_create_gpt(dt_comm_t dp, const dt_gpt_config_t* config,
                                const dt_optimizer_config_t* optimizer, dt_model_t* model) {
  clear_output(model);
  return call<dt_comm_s>(__func__, dp, Kind::comm, "dp", [&](dt_comm_s& c) {
    create_gpt(c, nullptr, config, optimizer, model);
  });
}

dt_result_t dt_model_create_gpt_grid(dt_grid_t grid, const dt_gpt_config_t* config,
                                     const dt_optimizer_config_t* optimizer, dt_model_t* model) {
  clear_output(model);
  return call<dt_grid_s>(__func__, grid, Kind::grid, "grid", [&](dt_grid_s& g) {
    create_gpt(*g.comms[DT_GROUP_WORLD], &g, config, optimizer, model);
  });
}

dt_result_t dt_model_destroy(dt_model_t model) {
  return with_model(__func__, model, [](dt_model_s& m) { release_child(&m); });
}

dt_result_t dt_model_device(dt_model_t model, char* name, size_t capacity, size_t* length) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_ptr(length, "length");
    const std::string text = m.device().name();
    *length = text.size();
    if (capacity == 0 && !name) return;  // length query
    need_ptr(name, "name");
    need(capacity > text.size(), "capacity is too small for the description and its NUL");
    std::memcpy(name, text.c_str(), text.size() + 1);
  });
}

dt_result_t dt_mlp_forward_backward(dt_model_t model, const float* x, const int32_t* labels,
                                    int batch, float* loss) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_mlp_inputs(m, x, labels, true, batch, m.engine->shards_gradients());
    dtrain::MlpModel& mlp = need_mlp(m);
    float l = 0;
    {
      WholeParameters whole(*m.engine);  // ZeRO 3
      l = mlp.forward(x, labels, batch);
      m.engine->begin_backward();
      m.engine->writing_everything();  // ZeRO 2/3 on a GPU: map the dropped pieces back first
      mlp.backward(m.engine->loss_scale());  // fp16's loss scale, else 1
    }
    m.engine->end_backward();
    if (loss) *loss = l;
  });
}

dt_result_t dt_mlp_evaluate(dt_model_t model, const float* x, const int32_t* labels, int batch,
                            float* loss) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_mlp_inputs(m, x, labels, true, batch, m.engine->gather() != nullptr, loss, "loss");
    dtrain::MlpModel& mlp = need_mlp(m);
    WholeParameters whole(*m.engine);  // ZeRO 3
    *loss = mlp.forward(x, labels, batch);
  });
}

dt_result_t dt_mlp_predict(dt_model_t model, const float* x, int batch, float* logits) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    need_mlp_inputs(m, x, nullptr, false, batch, m.engine->gather() != nullptr, logits,
                    "logits");
    dtrain::MlpModel& mlp = need_mlp(m);
    WholeParameters whole(*m.engine);  // ZeRO 3
    mlp.forward(x, nullptr, batch);
    const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(mlp.config().sizes.back());
    m.device().copy(logits, mlp.logits(), n * sizeof(float), dtrain::CopyKind::device_to_host);
  });
}

dt_result_t dt_gpt_forward_backward(dt_model_t model, const int32_t* tokens, const int32_t* targets,
                                    int batch, int seq, float* loss) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    const int per_pass = need_gpt_inputs(m, tokens, targets, batch, seq, m.engine->shards_gradients());
    dtrain::GptModel& g = need_gpt(m);
    share_tied_embedding(m);
    float l = 0;
    if (m.pipeline) {
      m.engine->begin_backward();
      l = pipeline_pass(m, tokens, targets, per_pass, seq, true, m.engine->loss_scale());
      m.engine->end_backward();
    } else {
      l = g.forward(tokens, targets, batch, seq);
      m.engine->begin_backward();
      // Seeded with the fp16 loss scale (else 1); under ZeRO 2/3 its hook reduces each range
      // as backward finishes it.
      g.backward(m.engine->loss_scale());
      m.engine->end_backward();
    }
    if (loss) *loss = l;
  });
}

dt_result_t dt_gpt_evaluate(dt_model_t model, const int32_t* tokens, const int32_t* targets,
                            int batch, int seq, float* loss) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    const int per_pass =
        need_gpt_inputs(m, tokens, targets, batch, seq, m.engine->gather() != nullptr, loss, "loss");
    share_tied_embedding(m);
    *loss = m.pipeline ? pipeline_pass(m, tokens, targets, per_pass, seq, false, 0.0f)
                       : need_gpt(m).forward(tokens, targets, batch, seq);
  });
}

dt_result_t dt_gpt_decode(dt_model_t model, const int32_t* tokens, int count, int new_text,
                          float* logits) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    dtrain::GptModel& g = need_gpt(m);
    const int vocab = g.config().vocab, seq_len = g.config().seq_len;
    const bool collective_over_dp = m.engine->gather() != nullptr;  // ZeRO 3
    agreed_model_checks(m, collective_over_dp, [&] {
      need_ptr(logits, "logits");
      need(count >= 1, "count must be at least 1");
      if (!new_text && m.decoded_text_stale && g.decoded_length() > 0)
        fail(DT_ERR_INVALID_STATE, "the parameters changed (a step, a tensor set or a load) since the text "
                                   "began: start a new text (new_text) with all its tokens");
      const int held = new_text ? 0 : g.decoded_length();
      need(count <= seq_len - held, "the text would be longer than seq_len: start a new text "
                                    "(new_text) with its last tokens");
      need_tokens(tokens, static_cast<std::size_t>(count), vocab, "tokens");
      g.reserve_decode(new_text != 0);  // out of memory on one rank fails every rank
    }, true);
    const std::uint64_t text = mix(mix(fnv1a(tokens, sizeof(int32_t) * static_cast<std::size_t>(count)), count), new_text != 0);
    need_same_inputs(m, text, "tokens", collective_over_dp, true);
    share_tied_embedding(m);
    if (new_text) g.decode_reset();
    if (g.decoded_length() == 0) m.decoded_text_stale = false;  // a text of these parameters begins
    const float* out = m.pipeline ? m.pipeline->decode(tokens, count) : g.decode(tokens, count);
    dtrain::Communicator* tp = m.tp();
    if (out && !tp) {
      m.device().copy(logits, out, sizeof(float) * static_cast<std::size_t>(vocab),
                      dtrain::CopyKind::device_to_host);
    } else if (out) {
      // This rank's vocabulary rows; the TP group gathers whole rows, in rank order.
      std::vector<float> shard(static_cast<std::size_t>(g.vocab_shard().rows));
      m.device().copy(shard.data(), out, shard.size() * sizeof(float), dtrain::CopyKind::device_to_host);
      std::vector<std::size_t> rows(static_cast<std::size_t>(tp->size()));
      for (int r = 0; r < tp->size(); ++r)
        rows[static_cast<std::size_t>(r)] = static_cast<std::size_t>(dtrain::nn::vocab_shard(vocab, tp->size(), r).rows);
      tp->all_gather_v(shard.data(), logits, rows.data(), dtrain::DType::f32);
    }
    // Only the last pipeline stage computed the logits (out is null elsewhere).
    if (dtrain::Communicator* pp = m.pp())
      pp->broadcast(logits, logits, static_cast<std::size_t>(vocab), dtrain::DType::f32, pp->size() - 1);
  });
}

dt_result_t dt_model_loss_scale(dt_model_t model, float* scale, long* skipped) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    if (scale) *scale = m.engine->scaler().scale();
    if (skipped) *skipped = m.engine->scaler().skipped_steps();
  });
}

dt_result_t dt_model_step(dt_model_t model, float lr, float* grad_norm) {
  return with_model(__func__, model, [&](dt_model_s& m) {
    // Collective over every rank of the model (the gradient reduction, the whole model's
    // norm): a bad lr on some ranks fails them all.
    agreed_checks(m.group(), true, [&] { need(lr >= 0 && lr < 1e30f, "lr must be a finite value >= 0"); });
    need_same_lr(m.group(), lr);
    share_tied_embedding(m);
    double norm = 0;
    try {
      norm = m.engine->step(lr);
    } catch (...) {
      // A step not taken (non-finite gradients, or fp16 overflowing at the minimum scale)
      // may have reduced, divided or rounded the gradients already: they are dropped, so
      // the next backward starts from zero as after a step.
      m.engine->zero_grads();
      throw;
    }
    m.engine->zero_grads();
    m.decoded_text_stale = true;
    if (grad_norm) *grad_norm = static_cast<float>(norm);
  });
}

}  // extern "C"
