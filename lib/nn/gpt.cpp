// GPT model: parameter registration, GPT-2 initialisation, and the forward/backward passes written as a sequence of Device ops (llm.c style), split over a
// tensor-parallel group (Megatron layout, optionally sequence parallel; see
// docs/tensor-parallel.md). A group of one runs exactly the single-process computation.
#include "dtrain/nn/gpt.hpp"

#include <climits>
#include <cmath>
#include <string>

#include "dtrain/core/error.hpp"
#include "nn/gpt_block.hpp"
#include "nn/tp_comm.hpp"

namespace dtrain {

namespace {
// Parameters of a GPT with V vocabulary rows (in double: whether a configuration's count
// fits at all).
template <class Count>
Count count_parameters(const GptConfig& g, Count V) {
  const Count C = static_cast<Count>(g.d_model), T = static_cast<Count>(g.seq_len);
  const Count block = 12 * C * C + 13 * C;  // ln_1, c_attn, c_proj, ln_2, c_fc, c_proj
  return V * C + T * C + static_cast<Count>(g.layers) * block + 2 * C +
         (g.tie_embeddings ? 0 : V * C);
}
}  // namespace

std::size_t GptConfig::parameter_count() const {
  return count_parameters<std::size_t>(*this, padded_vocab());
}

std::size_t GptConfig::logical_parameter_count() const {
  return count_parameters<std::size_t>(*this, static_cast<std::size_t>(vocab));
}

void GptConfig::validate() const {
  DTRAIN_CHECK(layers > 0, Errc::invalid_config, "layers must be positive, got " << layers);
  DTRAIN_CHECK(heads > 0, Errc::invalid_config, "heads must be positive, got " << heads);
  DTRAIN_CHECK(d_model > 0, Errc::invalid_config, "d-model must be positive, got " << d_model);
  DTRAIN_CHECK(saved_activations == DType::f32 || saved_activations == DType::bf16 ||
                   saved_activations == DType::f16,
               Errc::invalid_config, "saved activations must be f32, bf16 or f16");
  DTRAIN_CHECK(d_model % heads == 0, Errc::invalid_config,
               "heads (" << heads << ") must divide d-model (" << d_model << ")");
  DTRAIN_CHECK(seq_len > 0, Errc::invalid_config, "seq-len must be positive, got " << seq_len);
  DTRAIN_CHECK(vocab > 1, Errc::invalid_config, "vocab must be at least 2, got " << vocab);
  // Index arithmetic in the kernels is 64-bit, but GEMM dimensions are int.
  DTRAIN_CHECK(d_model <= kMaxDModel, Errc::invalid_config,
               "d-model must be at most 2^28 = " << kMaxDModel << " (4 d-model is a GEMM's int size), got " << d_model);
  DTRAIN_CHECK(vocab <= kMaxVocab, Errc::invalid_config,
               "vocab must be at most 2^30 = " << kMaxVocab << " (a GEMM's int size), got " << vocab);
  // Per-layer bookkeeping (some KB a layer) is built before the parameters' memory is asked
  // for: 2^31 layers took 8 GB and half a minute of it before the request failed, 10^6 took
  // 6 GB and a minute. The deepest published models have a few hundred.
  DTRAIN_CHECK(layers <= (1 << 16), Errc::invalid_config,
               "layers must be at most 65536, got " << layers);
  const double count = count_parameters<double>(*this, static_cast<double>(vocab));
  DTRAIN_CHECK(count <= 0x1p50, Errc::invalid_config,
               "the model would have " << count << " parameters: more than 2^50, beyond any "
               "machine's memory (layers " << layers << ", d-model " << d_model << ", vocab "
               << vocab << ", seq-len " << seq_len << ")");
}

void GptConfig::validate_tp(int tp, bool sequence_parallel) const {
  DTRAIN_CHECK(tp > 0, Errc::invalid_config, "tensor-parallel size --tp must be positive");
  DTRAIN_CHECK(heads % tp == 0, Errc::invalid_config,
               "heads (" << heads << ") must be divisible by the tensor-parallel size --tp ("
                         << tp << "): attention is split by whole heads");
  DTRAIN_CHECK(d_model % tp == 0, Errc::invalid_config,
               "d-model (" << d_model << ") must be divisible by the tensor-parallel size --tp ("
                           << tp << ")");
  DTRAIN_CHECK((4LL * d_model) % tp == 0, Errc::invalid_config,
               "4 * d-model (" << 4LL * d_model
                               << ") must be divisible by the tensor-parallel size --tp (" << tp
                               << "): the MLP is split by hidden units");
  DTRAIN_CHECK(vocab >= tp, Errc::invalid_config,
               "vocab (" << vocab << ") must be at least the tensor-parallel size --tp (" << tp
                         << ")");
  DTRAIN_CHECK(!sequence_parallel || seq_len % tp == 0, Errc::invalid_config,
               "--sequence-parallel needs seq-len (" << seq_len
                                                     << ") divisible by the tensor-parallel size --tp ("
                                                     << tp << ")");
}


namespace {
int group_size(const Communicator* tp) { return tp && tp->valid() ? tp->size() : 1; }
}  // namespace

GptModel::GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
                   Communicator* tp, bool sequence_parallel)
    : GptModel(cfg, dev, seed, max_batch, GptStage{}, tp, sequence_parallel) {}

GptModel::GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
                   const GptStage& stage, Communicator* tp, bool sequence_parallel)
    : GptModel(cfg, dev, seed, max_batch, std::vector<GptStage>{stage}, tp, sequence_parallel) {}

GptModel::GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
                   const std::vector<GptStage>& chunks, Communicator* tp, bool sequence_parallel,
                   Weights weights)
    : cfg_(cfg), chunks_(chunks), dev_(&dev), max_batch_(max_batch), tp_(nullptr, dev),
      params_(dev) {
  // Every check before the first collective, so a bad configuration throws on all ranks.
  cfg_.validate();
  cfg_.validate_tp(group_size(tp), sequence_parallel);
  DTRAIN_CHECK(max_batch > 0, Errc::invalid_config,
               "micro-batch must be positive, got " << max_batch);
  // The passes count a micro-batch's tokens in an int.
  DTRAIN_CHECK(static_cast<long long>(max_batch) * cfg_.seq_len <= INT_MAX, Errc::invalid_config,
               "micro-batch " << max_batch << " x seq-len " << cfg_.seq_len << " tokens exceed " << INT_MAX);
  DTRAIN_CHECK(!chunks_.empty(), Errc::invalid_config, "a model needs at least one layer chunk");
  int next_layer = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    GptStage& ch = chunks_[c];
    if (ch.layers < 0) ch.layers = cfg_.layers - ch.first_layer;
    DTRAIN_CHECK(ch.first_layer >= next_layer && ch.layers >= 1 &&
                     ch.first_layer + ch.layers <= cfg_.layers,
                 Errc::invalid_config,
                 "pipeline stage layers [" << ch.first_layer << ", " << ch.first_layer + ch.layers
                                           << ") outside the model's " << cfg_.layers
                                           << " layers or not after the previous chunk");
    DTRAIN_CHECK((!ch.embedding || c == 0) && (!ch.head || c + 1 == chunks_.size()),
                 Errc::invalid_config,
                 "only the first chunk may hold the embedding and only the last the head");
    DTRAIN_CHECK(ch.slots >= 1, Errc::invalid_config,
                 "activation slots must be at least 1, got " << ch.slots);
    next_layer = ch.first_layer + ch.layers;
    chunk_begin_.push_back(static_cast<int>(block_layer_.size()));
    for (int l = 0; l < ch.layers; ++l) block_layer_.push_back(ch.first_layer + l);
  }
  chunk_begin_.push_back(static_cast<int>(block_layer_.size()));
  stage_ = {chunks_.front().first_layer, static_cast<int>(block_layer_.size()),
            chunks_.front().embedding, chunks_.back().head, chunks_.front().slots};
  tp_ = nn::TpGroup(tp, dev);
  const int P = tp_.size();
  sp_ = sequence_parallel && P > 1;
  C_local_ = cfg_.d_model / P;
  heads_local_ = cfg_.heads / P;
  hidden_local_ = 4 * cfg_.d_model / P;
  blocks_.resize(static_cast<std::size_t>(stage_.layers));
  declare_parameters();
  const bool write_weights = weights != Weights::deferred;
  params_.allocate(/*hold_params=*/write_weights, /*hold_grads=*/weights == Weights::init);
  bind_parameters();
  // Activations first: a model too large to map fails at once, not after initialising
  // parameters it cannot use (tens of seconds for tens of thousands of layers).
  allocate_activations();
  if (write_weights) init_weights(seed);
  bind_layernorm_grads();
  plan_grad_ready_ranges();
}

void GptModel::plan_grad_ready_ranges() {
  // The arena holds parameters in declaration order (wte, wpe, h.0 ... h.L-1, ln_f,
  // lm_head), and backward finishes them from the end: each range is contiguous. A pipeline
  // stage leaves out the head or embedding range it does not hold (ready_index_ maps the
  // step of backward to its range, -1 for none).
  const std::size_t head_start =
      stage_.head ? params_.at("ln_f.weight").offset : params_.numel();
  auto add = [this](std::size_t first, std::size_t last) {
    ready_index_.push_back(first < last ? static_cast<int>(grad_ready_ranges_.size()) : -1);
    if (first < last) grad_ready_ranges_.push_back({first, last});
  };
  add(head_start, params_.numel());
  std::size_t end = head_start;
  for (int l = stage_.layers - 1; l >= 0; --l) {
    const std::size_t start =
        params_.at("h." + std::to_string(block_layer_[l]) + ".ln_1.weight").offset;
    add(start, end);
    end = start;
  }
  add(0, end);  // wte (final only after the embedding backward), wpe
}

void GptModel::acquire(int unit, int next) const {
  if (param_hooks_.acquire && unit >= 0) param_hooks_.acquire(unit, next);
}

void GptModel::release(int unit) const {
  if (param_hooks_.release && unit >= 0) param_hooks_.release(unit);
}

void GptModel::grads_ready(std::size_t index) const {
  const int i = ready_index_[index];
  if (grad_ready_hook_ && i >= 0)
    grad_ready_hook_(grad_ready_ranges_[i].first, grad_ready_ranges_[i].second);
}

void GptModel::grads_writing(std::size_t index) const {
  const int i = ready_index_[index];
  if (grad_write_hook_ && i >= 0)
    grad_write_hook_(grad_ready_ranges_[i].first, grad_ready_ranges_[i].second);
}

GptModel::~GptModel() = default;

void GptModel::declare_parameters() {
  const int C = cfg_.d_model, V = cfg_.vocab, T = cfg_.seq_len;
  // Embeddings are decayed, as in GPT-2 training practice (nanoGPT decays every 2-D tensor).
  // With tied embeddings the head stage keeps its own copy of wte (Megatron's layout).
  if (has_wte()) wte_.declare(params_, "wte", V, C, tp_);
  if (stage_.embedding) params_.add("wpe", {T, C}, /*decay=*/true);  // replicated
  for (int l = 0; l < stage_.layers; ++l) {
    Block& b = blocks_[l];
    const std::string p = "h." + std::to_string(block_layer_[l]) + ".";
    params_.start_unit();
    b.ln_1.declare(params_, p + "ln_1", C);
    b.c_attn.declare(params_, p + "attn.c_attn", C, 3 * C, tp_, /*parts=*/3);  // q|k|v
    b.attn_proj.declare(params_, p + "attn.c_proj", C, C, tp_);
    b.ln_2.declare(params_, p + "ln_2", C);
    b.c_fc.declare(params_, p + "mlp.c_fc", C, 4 * C, tp_);
    b.mlp_proj.declare(params_, p + "mlp.c_proj", 4 * C, C, tp_);
  }
  if (stage_.head) {
    params_.start_unit();
    ln_f_.declare(params_, "ln_f", C);
    if (!cfg_.tie_embeddings) lm_head_.declare(params_, "lm_head.weight", V, C, tp_);
  }
  ce_.vocab = V;
  ce_.shard = has_wte() ? wte_.shard : lm_head_.shard;
}

void GptModel::init_weights(std::uint64_t seed, const ParameterStore::ArenaRanges* only) {
  // GPT-2: weights N(0, 0.02); the two projections that write into the residual stream are
  // scaled by 1/sqrt(2*layers) so its variance does not grow with depth; biases 0; LN 1/0.
  // init_normal keys every element by its logical index, so any split starts identical.
  const float std_w = 0.02f;
  const float std_res = static_cast<float>(0.02 / std::sqrt(2.0 * cfg_.layers));
  for (const ParamInfo& p : params_) {
    const std::string& n = p.name;
    auto ends_with = [&](const char* s) {
      const std::string suf(s);
      return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
    };
    const bool is_ln = n.find("ln_") != std::string::npos;
    if (is_ln && ends_with(".weight")) {
      params_.init_constant(p, 1.0f, only);
    } else if (ends_with(".bias")) {
      params_.init_constant(p, 0.0f, only);  // also when called again on trained values
    } else if (ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight")) {
      params_.init_normal(p, seed, 0.0f, std_res, only);
    } else {
      params_.init_normal(p, seed, 0.0f, std_w, only);  // wte, wpe, c_attn, c_fc, lm_head
    }
  }
}

void GptModel::bind_parameters() {
  if (has_wte()) wte_.bind(params_);
  if (stage_.embedding) {
    const ParamInfo& ppe = params_.at("wpe");
    wpe_ = params_.param(ppe);
    dwpe_ = params_.grad(ppe);
  }
  for (Block& b : blocks_) {
    b.ln_1.bind(params_);
    b.c_attn.bind(params_);
    b.attn_proj.bind(params_);
    b.ln_2.bind(params_);
    b.c_fc.bind(params_);
    b.mlp_proj.bind(params_);
  }
  if (!stage_.head) return;
  ln_f_.bind(params_);
  if (cfg_.tie_embeddings) {
    head_w_ = wte_.w;
    head_dw_ = wte_.dw;
  } else {
    lm_head_.bind(params_);
    head_w_ = lm_head_.w;
    head_dw_ = lm_head_.dw;
  }
}

void GptModel::bind_layernorm_grads() {
  // With sequence parallelism each rank's LayerNorms see only its rows, so their gradients
  // are partial sums: backward collects them in ln_grads_ (block l at 4C*l: ln_1 then ln_2;
  // ln_f last) and adds the sum over the group to the arena when the block is done.
  if (!sp_) return;
  const std::size_t C = cfg_.d_model;
  float* s = ln_grads_;
  auto redirect = [&](nn::LayerNorm& ln) {
    ln_grad_targets_.push_back({ln.dw, s});
    ln_grad_targets_.push_back({ln.db, s + C});
    ln.dw = s;
    ln.db = s + C;
    s += 2 * C;
  };
  for (Block& b : blocks_) {
    redirect(b.ln_1);
    redirect(b.ln_2);
  }
  if (stage_.head) redirect(ln_f_);
}

void GptModel::reduce_layernorm_grads(std::size_t first, std::size_t count) {
  // ln_grad_targets_[first, first + count) are adjacent in ln_grads_: one all-reduce.
  const std::size_t C = cfg_.d_model;
  float* s = ln_grad_targets_[first].second;
  tp_.all_reduce(s, count * C);
  for (std::size_t i = first; i < first + count; ++i)
    dev_->accumulate(ln_grad_targets_[i].first, ln_grad_targets_[i].second,
                     static_cast<std::int64_t>(C));
}

// f (enter): the full input of a column-parallel layer from the residual rows held here.
const float* GptModel::enter_region_fwd(const float* x_rows, int R) {
  if (!sp_) {
    nn::tp::copy_to_region_fwd(tp_);
    return x_rows;
  }
  nn::tp::gather_from_sequence_fwd(tp_, x_rows, gather_,
                                   static_cast<std::size_t>(R) * cfg_.d_model);
  return gather_;
}

// Backward of f: this rank's partial input gradient [N, C] -> the gradient of its rows.
float* GptModel::enter_region_bwd(float* dx_full, int N, int R) {
  const std::size_t C = cfg_.d_model;
  if (!sp_) {
    nn::tp::copy_to_region_bwd(tp_, dx_full, static_cast<std::size_t>(N) * C);
    return dx_full;
  }
  nn::tp::gather_from_sequence_bwd(tp_, dx_full, dln_rows_, static_cast<std::size_t>(R) * C);
  return dln_rows_;
}

// g (leave): the partial output [N, C] of a row-parallel layer -> its sum over the group,
// for the rows held here (in place, or into out_rows with sequence parallelism).
const float* GptModel::leave_region_fwd(float* y_partial, float* out_rows, int N, int R) {
  const std::size_t C = cfg_.d_model;
  if (!sp_) {
    nn::tp::reduce_from_region_fwd(tp_, y_partial, static_cast<std::size_t>(N) * C);
    return y_partial;
  }
  nn::tp::reduce_scatter_to_sequence_fwd(tp_, y_partial, out_rows,
                                         static_cast<std::size_t>(R) * C);
  return out_rows;
}

// Backward of g: the gradient of the rows held here -> the full output gradient [N, C].
const float* GptModel::leave_region_bwd(const float* dy_rows, int R) {
  if (!sp_) {
    nn::tp::reduce_from_region_bwd(tp_);
    return dy_rows;
  }
  nn::tp::reduce_scatter_to_sequence_bwd(tp_, dy_rows, dres_full_,
                                         static_cast<std::size_t>(R) * cfg_.d_model);
  return dres_full_;
}

float GptModel::forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T) {
  return forward_stage(tokens, targets, nullptr, B, T);
}

void GptModel::backward(float dloss) { backward_stage(dloss, nullptr); }

std::size_t GptModel::boundary_floats(int B, int T) const noexcept {
  const std::size_t N = static_cast<std::size_t>(B) * T;
  return (sp_ ? N / tp_.size() : N) * cfg_.d_model;
}

void GptModel::check_batch_shape(int B, int T) const {
  DTRAIN_CHECK(B > 0 && B <= max_batch_, Errc::invalid_argument,
               "batch " << B << " outside [1, " << max_batch_ << "]");
  DTRAIN_CHECK(T > 0 && T <= cfg_.seq_len, Errc::invalid_argument,
               "sequence length " << T << " outside [1, " << cfg_.seq_len << "]");
  DTRAIN_CHECK(!sp_ || (B * T) % tp_.size() == 0, Errc::invalid_argument,
               "sequence parallelism needs batch * sequence length (" << B * T
                   << ") divisible by --tp (" << tp_.size() << ")");
}

float GptModel::forward_stage(const std::int32_t* tokens, const std::int32_t* targets,
                              const float* input, int B, int T, int chunk, int slot) {
  check_batch_shape(B, T);
  check_operand_format_unchanged();
  const int P = tp_.size();
  const int N = B * T, C = cfg_.d_model, V = cfg_.vocab, Vl = ce_.shard.padded_rows;
  const int R = sp_ ? N / P : N;
  const std::int64_t RC = static_cast<std::int64_t>(R) * C;
  SlotUse& use = bind_slot(chunk, slot);
  const bool emb = chunks_[chunk].embedding, head = chunks_[chunk].head;
  const int l0 = chunk_begin_[chunk], l1 = chunk_begin_[chunk + 1];  // this chunk's blocks
  DTRAIN_CHECK(emb ? tokens != nullptr : input != nullptr, Errc::invalid_argument,
               "forward_stage needs " << (emb ? "tokens" : "the stage input"));
  if (!head) targets = nullptr;  // the loss lives on the head chunk
  for (int i = 0; i < N; ++i) {
    DTRAIN_CHECK(!emb || (tokens[i] >= 0 && tokens[i] < V), Errc::invalid_argument,
                 "token " << tokens[i] << " at position " << i << " outside [0, " << V << ")");
    DTRAIN_CHECK(!targets || (targets[i] >= 0 && targets[i] < V), Errc::invalid_argument,
                 "target " << targets[i] << " at position " << i << " outside [0, " << V << ")");
  }
  Device& d = *dev_;
  const std::size_t ibytes = sizeof(std::int32_t) * static_cast<std::size_t>(N);
  if (emb) d.copy(tokens_, tokens, ibytes, CopyKind::host_to_device);
  if (targets) d.copy(targets_, targets, ibytes, CopyKind::host_to_device);
  use = {B, T, targets != nullptr};

  // encoder: wte[token] + wpe[position]. Each rank looks up its vocabulary rows (zeros for
  // the rest) and rank 0 adds wpe, so the sum over the group is the embedding; exactly one
  // addend of each element is non-zero in the wte part, which keeps it bit-exact.
  if (emb) {
    acquire(embedding_unit(), stage_.layers > 0 ? block_unit(0) : -1);
    float* partial = sp_ ? proj_ : encoded_;
    wte_.forward(d, partial, tokens_, N);
    if (tp_.rank() == 0) d.positional_forward(partial, wpe_, B, T, C);
    release(embedding_unit());
    leave_region_fwd(partial, encoded_, N, R);
  } else if (input != encoded_) {
    d.copy_floats(encoded_, input, RC);  // the previous stage's output rows
  }

  const float* residual = encoded_;
  for (int l = l0; l < l1; ++l) {
    Block& b = blocks_[l];
    acquire(block_unit(l), l + 1 < l1 ? block_unit(l + 1) : (head ? head_unit() : -1));
    block_forward(b, residual, B, T, /*to_output=*/true);
    keep_16bit(b, B);
    release(block_unit(l));
    residual = b.res3;
  }
  stage_out_ = residual;
  if (!head) return 0.0f;
  const int tied = cfg_.tie_embeddings ? embedding_unit() : -1;  // head_w_ is wte
  acquire(head_unit(), tied);
  acquire(tied, -1);
  ln_f_.forward(d, lnf_, lnf_mean_, lnf_rstd_, residual, R);
  // LM head over this rank's vocabulary rows: logits[N,Vl] = lnf[N,C] · head[Vl,C]^T
  // (padding rows of head are zero). Its input is the full ln_f output on every rank.
  const float* head_in = lnf_;
  if (sp_) {
    nn::tp::gather_from_sequence_fwd(tp_, lnf_, lnf_full_, static_cast<std::size_t>(RC));
    head_in = lnf_full_;
  } else {
    nn::tp::copy_to_region_fwd(tp_);
  }
  // With targets only the loss reads the logits, and where the device can, the GEMM writes
  // them as 16-bit words for it (head_writes_logits16); without, they are what logits() shows.
  logits_are_words_ = targets && head_writes_logits16();
  if (logits_are_words_)
    d.linear_forward(nullptr, head_in, head_w_, nullptr, N, C, Vl, nullptr, logit_words());
  else
    d.gemm(false, true, N, Vl, C, 1.0f, head_in, C, head_w_, C, 0.0f, logits_, Vl);
  release(tied);
  release(head_unit());
  if (!targets) return 0.0f;

  if (logits_are_words_)
    ce_.forward_16bit(d, tp_, losses_, lse_, logit_words(), targets_, N);
  else
    ce_.forward(d, tp_, losses_, lse_, logits_, targets_, N);
  d.copy(host_losses_.data(), losses_, sizeof(float) * static_cast<std::size_t>(N),
         CopyKind::device_to_host);
  double sum = 0;  // double: the mean of thousands of losses stays exact to fp32
  for (int i = 0; i < N; ++i) sum += host_losses_[i];
  return static_cast<float>(sum / N);
}

void GptModel::block_forward(Block& b, const float* residual, int B, int T, bool to_output) {
  Device& d = *dev_;
  const int N = B * T, R = sp_ ? N / tp_.size() : N;
  const std::int64_t RC = static_cast<std::int64_t>(R) * cfg_.d_model;
  const bool kept16 = reads_kept16();  // then R == N
  const std::int64_t NF = static_cast<std::int64_t>(N) * hidden_local_;
  // With kept copies, LayerNorm, c_attn, the attention and GELU write theirs in the same pass
  // (c_attn's GEMM rounds its own result), and the ops after them read those, never the fp32
  // values (not even written, `fp32` null): a block's 16-bit copy as words, or null without.
  auto words = [kept16](float* copy) {
    return kept16 ? reinterpret_cast<std::uint16_t*>(copy) : nullptr;
  };
  auto fp32 = [kept16](float* value) { return kept16 ? nullptr : value; };
  // A projection's output joins the residual stream: in its GEMM where no reduction over the
  // group comes between (one rank), else after the reduction.
  auto project = [&](const nn::RowParallelLinear& proj, float* out, const float* res_in,
                     const float* x, const std::uint16_t* x16) {
    if (tp_.size() == 1) {
      proj.forward_residual(d, out, res_in, x, N, x16);
    } else {
      proj.forward(d, proj_, x, N, x16);
      d.residual_forward(out, res_in, leave_region_fwd(proj_, out, N, R), RC);
    }
  };
  // attention: res2 = residual + c_proj(attn(c_attn(ln_1(residual))))
  b.ln_1.forward(d, fp32(b.ln1), b.ln1_mean, b.ln1_rstd, residual, R, words(b.ln1_16));
  b.c_attn.forward(d, fp32(b.qkv), enter_region_fwd(b.ln1, R), N, words(b.ln1_16),
                   words(b.qkv16));
  progress();
  d.attention_forward(fp32(b.atty), b.att, att_ws_, fp32(b.qkv), B, T, C_local_, heads_local_,
                      words(b.qkv16), words(b.atty16));
  progress();
  project(b.attn_proj, b.res2, residual, b.atty, words(b.atty16));
  // MLP: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2))))
  b.ln_2.forward(d, fp32(b.ln2), b.ln2_mean, b.ln2_rstd, b.res2, R, words(b.ln2_16));
  if (kept16) {  // c_fc's GEMM rounds its result into the copy that GELU and backward read
    b.c_fc.forward(d, nullptr, enter_region_fwd(b.ln2, R), N, words(b.ln2_16), words(b.fch16));
    progress();
    d.gelu_forward_16bit(words(b.fch_gelu16), words(b.fch16), NF);
  } else {
    b.c_fc.forward(d, b.fch, enter_region_fwd(b.ln2, R), N);
    progress();
    d.gelu_forward(b.fch_gelu, b.fch, NF);
  }
  if (!to_output) return;
  project(b.mlp_proj, b.res3, b.res2, b.fch_gelu, words(b.fch_gelu16));
}

void GptModel::backward_stage(float dloss, const float* doutput, int chunk, int slot) {
  SlotUse& slot_use = bind_slot(chunk, slot);
  const SlotUse use = slot_use;
  const bool emb = chunks_[chunk].embedding, head = chunks_[chunk].head;
  const int l0 = chunk_begin_[chunk], l1 = chunk_begin_[chunk + 1];  // this chunk's blocks
  DTRAIN_CHECK(head ? use.targets : (use.B > 0 && doutput != nullptr), Errc::invalid_argument,
               "backward needs a forward() " << (head ? "with targets" : "and doutput")
                                             << " first (one backward a forward: the loss's "
                                                "gradient overwrites the logits)");
  check_operand_format_unchanged();
  const int B = use.B, T = use.T, N = B * T, C = cfg_.d_model, P = tp_.size();
  const int R = sp_ ? N / P : N, Vl = ce_.shard.padded_rows;
  const std::int64_t NF = static_cast<std::int64_t>(N) * hidden_local_;
  Device& d = *dev_;
  auto zero = [&](float* p, std::int64_t n) { d.zero(p, sizeof(float) * n); };
  constexpr Device::GradWrite overwrite = Device::GradWrite::overwrite;
  if (sp_) zero(ln_grads_, static_cast<std::int64_t>(ln_grad_targets_.size()) * C);

  if (head) {
    const int tied = cfg_.tie_embeddings ? embedding_unit() : -1;  // head_w_ is wte
    acquire(head_unit(), tied);
    acquire(tied, block_unit(l1 - 1));
    grads_writing(0);
    if (tied >= 0) grads_writing(ready_index_.size() - 1);  // head_dw_ is the wte gradient
    // loss = mean over N positions, so each position's loss gets dloss / N
    d.fill(dlosses_, dloss / static_cast<float>(N), N);
    slot_use.targets = false;  // the logits become their gradient below: a second backward would read those
    // dlogits overwrite the logits in place (they are not needed any more): their 16-bit
    // words with the words' gradient (head_writes_logits16), or fp32 with fp32, or they go
    // straight into 16-bit words where the GEMMs below read those (head_reads_dlogits16)
    const float* dlogits = nullptr;
    const std::uint16_t* dlogits16 = nullptr;
    if (head_writes_logits16()) {
      std::uint16_t* words = logit_words();
      ce_.backward_16bit(d, tp_, words, nullptr, lse_, targets_, dlosses_, N, words);
      dlogits16 = words;
    } else if (head_reads_dlogits16()) {
      auto* words = reinterpret_cast<std::uint16_t*>(dlogits16_);
      ce_.backward_16bit(d, tp_, words, logits_, lse_, targets_, dlosses_, N);
      dlogits16 = words;
    } else {
      ce_.backward(d, tp_, logits_, logits_, lse_, targets_, dlosses_, N);
      dlogits = logits_;
    }
    // LM head, a linear layer without bias: dlnf[N,C] = dlogits · head (this rank's vocabulary
    // part of it); dhead[Vl,C] += dlogits^T · lnf (complete: each row sees only its own
    // logits). One call, so a GPU rounds dlogits to 16 bits once for both GEMMs.
    const float* head_in = sp_ ? lnf_full_ : lnf_;
    std::uint16_t* dlnf16 = ln_grad_words();
    d.linear_backward(dlnf16 ? nullptr : dln_, head_dw_, nullptr, dlogits, head_in, head_w_, N,
                      C, Vl, Device::GradWrite::overwrite, nullptr, dlogits16, dlnf16);
    progress();
    const float* dlnf = dlnf16 ? nullptr : enter_region_bwd(dln_, N, R);

    // dres_ carries d(residual stream) down through the blocks; layernorm backward adds into it
    zero(dres_, static_cast<std::int64_t>(R) * C);
    const float* last = blocks_[l1 - 1].res3;
    ln_f_.backward(d, dres_, dlnf, last, lnf_mean_, lnf_rstd_, R, dlnf16);
    if (sp_) reduce_layernorm_grads(ln_grad_targets_.size() - 2, 2);
    release(tied);
    release(head_unit());
  } else {
    d.copy_floats(dres_, doutput, static_cast<std::int64_t>(R) * C);
  }
  if (head) grads_ready(0);

  for (int l = l1 - 1; l >= l0; --l) {
    Block& b = blocks_[l];
    const float* res_in = l == l0 ? encoded_ : blocks_[l - 1].res3;
    acquire(block_unit(l), l > l0 ? block_unit(l - 1) : -1);  // the embedding backward needs no weights
    grads_writing(static_cast<std::size_t>(stage_.layers - l));
    if (cfg_.recompute) block_forward(b, res_in, B, T, /*to_output=*/false);
    restore_16bit(b, B);
    // An input of a linear layer, GELU or the attention: its kept 16-bit copy alone
    // (reads_kept16, which left the fp32 value unrestored), or the fp32 value.
    const bool kept16 = reads_kept16();
    auto fp32_input = [kept16](const float* x) { return kept16 ? nullptr : x; };
    auto kept_input = [kept16](const float* copy) {
      return kept16 ? reinterpret_cast<const std::uint16_t*>(copy) : nullptr;
    };
    // the LayerNorms' output gradient: 16-bit words (ln_grad_words), or fp32 in dln_
    std::uint16_t* dln16 = ln_grad_words();
    float* dln = dln16 ? nullptr : dln_;
    auto ln_grad = [&]() { return dln16 ? nullptr : enter_region_bwd(dln_, N, R); };
    // MLP: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2)))). Each gradient inside a block has
    // one producer, which writes it over (no zeroing); only dres_ collects several.
    // Under kept16 (and c_fc with a bias), 16-bit words from op to op, as autocast hands bf16
    // gradients on: c_proj's GEMM writes GELU's output gradient as words (in dfch_gelu_'s
    // place), GELU's gradient goes into the words c_fc's GEMMs read (in dfch_'s), c_fc's bias
    // gradient summed on the way.
    std::uint16_t* dgelu16 =
        kept16 && b.c_fc.db ? reinterpret_cast<std::uint16_t*>(dfch_gelu_) : nullptr;
    b.mlp_proj.backward(d, dgelu16 ? nullptr : dfch_gelu_, leave_region_bwd(dres_, R),
                        fp32_input(b.fch_gelu), N, overwrite, kept_input(b.fch_gelu16), dgelu16);
    progress();
    if (dgelu16) {
      auto* dfch16 = reinterpret_cast<std::uint16_t*>(dfch_);
      d.gelu_backward_rounded(dfch16, b.c_fc.db, kept_input(b.fch16), nullptr, N,
                              hidden_local_, dgelu16);
      b.c_fc.backward_from_words(d, dln, dfch16, nullptr, N, overwrite, kept_input(b.ln2_16),
                                 dln16);
    } else {
      d.gelu_backward(dfch_, fp32_input(b.fch), dfch_gelu_, NF, overwrite, kept_input(b.fch16));
      b.c_fc.backward(d, dln, dfch_, fp32_input(enter_region_fwd(b.ln2, R)),  // re-gathered with SP
                      N, overwrite, kept_input(b.ln2_16), dln16);
    }
    progress();
    b.ln_2.backward(d, dres_, ln_grad(), b.res2, b.ln2_mean, b.ln2_rstd, R,
                    dln16);  // dres_ is now d(res2)
    // attention: res2 = res_in + c_proj(attn(c_attn(ln_1(res_in))))
    // the attention's output gradient as words (in datty_'s place) under kept16
    std::uint16_t* datty16 = kept16 ? reinterpret_cast<std::uint16_t*>(datty_) : nullptr;
    float* datty = datty16 ? nullptr : datty_;
    b.attn_proj.backward(d, datty, leave_region_bwd(dres_, R), fp32_input(b.atty), N, overwrite,
                         kept_input(b.atty16), datty16);
    progress();
    // the attention's gradient straight into the words c_attn's GEMMs read (in dqkv_'s
    // place), c_attn's bias gradient summed on the way, where the device has that path
    auto* dqkv16 = reinterpret_cast<std::uint16_t*>(dqkv_);
    if (kept16 && b.c_attn.db &&
        d.attention_backward_rounded(dqkv16, b.c_attn.db, att_ws_, datty, b.att, B, T,
                                     C_local_, heads_local_, kept_input(b.qkv16),
                                     kept_input(b.atty16), datty16)) {
      progress();
      b.c_attn.backward_from_words(d, dln, dqkv16, nullptr, N, overwrite, kept_input(b.ln1_16),
                                   dln16);
    } else {
      d.attention_backward(dqkv_, att_ws_, datty, fp32_input(b.qkv), fp32_input(b.atty), b.att,
                           B, T, C_local_, heads_local_, overwrite, kept_input(b.qkv16),
                           kept_input(b.atty16), datty16);
      progress();
      b.c_attn.backward(d, dln, dqkv_, fp32_input(enter_region_fwd(b.ln1, R)), N, overwrite,
                        kept_input(b.ln1_16), dln16);
    }
    b.ln_1.backward(d, dres_, ln_grad(), res_in, b.ln1_mean, b.ln1_rstd, R, dln16);  // d(res_in)
    if (sp_) reduce_layernorm_grads(4 * static_cast<std::size_t>(l), 4);
    release(block_unit(l));
    grads_ready(static_cast<std::size_t>(stage_.layers - l));
  }
  if (!emb) {  // dres_ holds d(input): the previous stage's output gradient
    if (chunk == 0) grads_ready(ready_index_.size() - 1);  // a tied wte copy is final
    return;
  }
  // embedding: the full gradient of the (reduced) embedding output on every rank
  const float* demb = leave_region_bwd(dres_, R);
  grads_writing(ready_index_.size() - 1);
  wte_.backward(d, demb, tokens_, N);
  d.positional_backward(dwpe_, demb, B, T, C);
  grads_ready(ready_index_.size() - 1);
}

double GptModel::flops_per_token() const noexcept {
  const double L = cfg_.layers, C = cfg_.d_model, V = cfg_.vocab, T = cfg_.seq_len;
  const double matmul_params = L * 12.0 * C * C + V * C;  // blocks + LM head
  return 6.0 * matmul_params + 12.0 * L * C * T;
}

}  // namespace dtrain
