// GPT model: parameter registration, GPT-2 initialisation, activation layout, and the
// forward/backward passes written as a sequence of Device ops (llm.c style).
#include "dtrain/nn/gpt.hpp"

#include <cmath>
#include <string>

#include "dtrain/core/error.hpp"

namespace dtrain {

void GptConfig::validate() const {
  DTRAIN_CHECK(layers > 0, Errc::invalid_config, "layers must be positive, got " << layers);
  DTRAIN_CHECK(heads > 0, Errc::invalid_config, "heads must be positive, got " << heads);
  DTRAIN_CHECK(d_model > 0, Errc::invalid_config, "d-model must be positive, got " << d_model);
  DTRAIN_CHECK(d_model % heads == 0, Errc::invalid_config,
               "heads (" << heads << ") must divide d-model (" << d_model << ")");
  DTRAIN_CHECK(seq_len > 0, Errc::invalid_config, "seq-len must be positive, got " << seq_len);
  DTRAIN_CHECK(vocab > 1, Errc::invalid_config, "vocab must be at least 2, got " << vocab);
  // Index arithmetic in the kernels is 64-bit, but GEMM dimensions are int.
  DTRAIN_CHECK(static_cast<long long>(d_model) * 4 <= (1LL << 30) && vocab <= (1 << 30),
               Errc::invalid_config, "d-model/vocab too large");
}

struct GptModel::Block {
  nn::LayerNorm ln_1, ln_2;
  nn::Linear c_attn, attn_proj, c_fc, mlp_proj;
  // saved activations
  float *ln1 = nullptr, *ln1_mean = nullptr, *ln1_rstd = nullptr, *qkv = nullptr,
        *atty = nullptr, *att = nullptr, *res2 = nullptr, *ln2 = nullptr, *ln2_mean = nullptr,
        *ln2_rstd = nullptr, *fch = nullptr, *fch_gelu = nullptr, *res3 = nullptr;
};

GptModel::GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch)
    : cfg_(cfg), dev_(&dev), max_batch_(max_batch), Vp_(0), params_(dev) {
  cfg_.validate();
  DTRAIN_CHECK(max_batch > 0, Errc::invalid_config,
               "micro-batch must be positive, got " << max_batch);
  Vp_ = cfg_.padded_vocab();
  blocks_.resize(static_cast<std::size_t>(cfg_.layers));
  declare_parameters();
  params_.allocate();
  init_parameters(seed);
  allocate_activations();
  plan_grad_ready_ranges();
}

void GptModel::plan_grad_ready_ranges() {
  // The arena holds parameters in declaration order (wte, wpe, h.0 ... h.L-1, ln_f,
  // lm_head), and backward finishes them from the end: each range is contiguous.
  const std::size_t head_start = params_.at("ln_f.weight").offset;
  grad_ready_ranges_.push_back({head_start, params_.numel()});
  std::size_t end = head_start;
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const std::size_t start = params_.at("h." + std::to_string(l) + ".ln_1.weight").offset;
    grad_ready_ranges_.push_back({start, end});
    end = start;
  }
  grad_ready_ranges_.push_back({0, end});  // wte (final only after the embedding backward), wpe
}

void GptModel::grads_ready(std::size_t index) const {
  if (grad_ready_hook_) grad_ready_hook_(grad_ready_ranges_[index].first, grad_ready_ranges_[index].second);
}

GptModel::~GptModel() = default;

void GptModel::declare_parameters() {
  const int C = cfg_.d_model, V = cfg_.vocab, T = cfg_.seq_len;
  // Embeddings are decayed, as in GPT-2 training practice (nanoGPT decays every 2-D tensor).
  params_.add("wte", {V, C}, /*decay=*/true, /*padded_rows=*/Vp_);
  params_.add("wpe", {T, C}, /*decay=*/true);
  for (int l = 0; l < cfg_.layers; ++l) {
    Block& b = blocks_[l];
    const std::string p = "h." + std::to_string(l) + ".";
    b.ln_1.declare(params_, p + "ln_1", C);
    b.c_attn.declare(params_, p + "attn.c_attn", C, 3 * C);
    b.attn_proj.declare(params_, p + "attn.c_proj", C, C);
    b.ln_2.declare(params_, p + "ln_2", C);
    b.c_fc.declare(params_, p + "mlp.c_fc", C, 4 * C);
    b.mlp_proj.declare(params_, p + "mlp.c_proj", 4 * C, C);
  }
  ln_f_.declare(params_, "ln_f", C);
  if (!cfg_.tie_embeddings) params_.add("lm_head.weight", {V, C}, /*decay=*/true, Vp_);
}

void GptModel::init_parameters(std::uint64_t seed) {
  // GPT-2: weights N(0, 0.02); the two projections that write into the residual stream are
  // scaled by 1/sqrt(2*layers) so its variance does not grow with depth; biases 0; LN 1/0.
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
      params_.init_constant(p, 1.0f);
    } else if (ends_with(".bias")) {
      // arenas are zero-filled at allocation
    } else if (ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight")) {
      params_.init_normal(p, seed, 0.0f, std_res);
    } else {
      params_.init_normal(p, seed, 0.0f, std_w);  // wte, wpe, c_attn, c_fc, lm_head
    }
  }
  // bind layer pointers into the arenas
  const ParamInfo& pte = params_.at("wte");
  const ParamInfo& ppe = params_.at("wpe");
  wte_ = params_.param(pte);
  dwte_ = params_.grad(pte);
  wpe_ = params_.param(ppe);
  dwpe_ = params_.grad(ppe);
  for (Block& b : blocks_) {
    b.ln_1.bind(params_);
    b.c_attn.bind(params_);
    b.attn_proj.bind(params_);
    b.ln_2.bind(params_);
    b.c_fc.bind(params_);
    b.mlp_proj.bind(params_);
  }
  ln_f_.bind(params_);
  if (cfg_.tie_embeddings) {
    head_w_ = wte_;
    head_dw_ = dwte_;
  } else {
    const ParamInfo& ph = params_.at("lm_head.weight");
    head_w_ = params_.param(ph);
    head_dw_ = params_.grad(ph);
  }
}

void GptModel::allocate_activations() {
  const std::size_t N = static_cast<std::size_t>(max_batch_) * cfg_.seq_len;
  const std::size_t C = cfg_.d_model, T = cfg_.seq_len, NH = cfg_.heads;
  // Two passes over the same list: first sum the sizes, then hand out pointers into one
  // allocation. Every buffer starts on a 64-byte boundary.
  struct Slot {
    float** ptr;
    std::size_t n;
  };
  std::vector<Slot> slots;
  auto want = [&](float*& p, std::size_t n) { slots.push_back({&p, n}); };
  float* tok = nullptr;
  float* tgt = nullptr;
  want(tok, N);  // int32 tokens and targets live in float-sized slots
  want(tgt, N);
  want(encoded_, N * C);
  want(proj_, N * C);
  for (Block& b : blocks_) {
    want(b.ln1, N * C);
    want(b.ln1_mean, N);
    want(b.ln1_rstd, N);
    want(b.qkv, N * 3 * C);
    want(b.atty, N * C);
    want(b.att, static_cast<std::size_t>(max_batch_) * NH * T * T);
    want(b.res2, N * C);
    want(b.ln2, N * C);
    want(b.ln2_mean, N);
    want(b.ln2_rstd, N);
    want(b.fch, N * 4 * C);
    want(b.fch_gelu, N * 4 * C);
    want(b.res3, N * C);
  }
  want(lnf_, N * C);
  want(lnf_mean_, N);
  want(lnf_rstd_, N);
  want(logits_, N * static_cast<std::size_t>(Vp_));
  want(lse_, N);
  want(losses_, N);
  want(dlosses_, N);
  want(dres_, N * C);
  want(dln_, N * C);
  want(dqkv_, N * 3 * C);
  want(datty_, N * C);
  want(dfch_, N * 4 * C);
  want(dfch_gelu_, N * 4 * C);
  want(att_ws_, dev_->attention_workspace_floats(cfg_.seq_len));

  auto round = [](std::size_t n) { return (n + 15) / 16 * 16; };
  std::size_t total = 0;
  for (const Slot& s : slots) total += round(s.n);
  act_bytes_ = total * sizeof(float);
  act_buf_ = DeviceBuffer(*dev_, act_bytes_);
  float* base = act_buf_.as<float>();
  for (const Slot& s : slots) {
    *s.ptr = base;
    base += round(s.n);
  }
  tokens_ = reinterpret_cast<std::int32_t*>(tok);
  targets_ = reinterpret_cast<std::int32_t*>(tgt);
  host_losses_.resize(N);
}

float GptModel::forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T) {
  DTRAIN_CHECK(B > 0 && B <= max_batch_, Errc::invalid_argument,
               "batch " << B << " outside [1, " << max_batch_ << "]");
  DTRAIN_CHECK(T > 0 && T <= cfg_.seq_len, Errc::invalid_argument,
               "sequence length " << T << " outside [1, " << cfg_.seq_len << "]");
  const int N = B * T, C = cfg_.d_model, V = cfg_.vocab, NH = cfg_.heads;
  for (int i = 0; i < N; ++i) {
    DTRAIN_CHECK(tokens[i] >= 0 && tokens[i] < V, Errc::invalid_argument,
                 "token " << tokens[i] << " at position " << i << " outside [0, " << V << ")");
    DTRAIN_CHECK(!targets || (targets[i] >= 0 && targets[i] < V), Errc::invalid_argument,
                 "target " << targets[i] << " at position " << i << " outside [0, " << V << ")");
  }
  Device& d = *dev_;
  const std::size_t ibytes = sizeof(std::int32_t) * static_cast<std::size_t>(N);
  d.copy(tokens_, tokens, ibytes, CopyKind::host_to_device);
  if (targets) d.copy(targets_, targets, ibytes, CopyKind::host_to_device);
  last_B_ = B;
  last_T_ = T;
  have_targets_ = targets != nullptr;

  // encoder: wte[token] + wpe[position]
  d.embedding_forward(encoded_, tokens_, wte_, N, C, 0, V);
  d.positional_forward(encoded_, wpe_, B, T, C);

  const float* residual = encoded_;
  for (Block& b : blocks_) {
    b.ln_1.forward(d, b.ln1, b.ln1_mean, b.ln1_rstd, residual, N);
    b.c_attn.forward(d, b.qkv, b.ln1, N);
    d.attention_forward(b.atty, b.att, b.qkv, B, T, C, NH);
    b.attn_proj.forward(d, proj_, b.atty, N);
    d.residual_forward(b.res2, residual, proj_, static_cast<std::int64_t>(N) * C);
    b.ln_2.forward(d, b.ln2, b.ln2_mean, b.ln2_rstd, b.res2, N);
    b.c_fc.forward(d, b.fch, b.ln2, N);
    d.gelu_forward(b.fch_gelu, b.fch, static_cast<std::int64_t>(N) * 4 * C);
    b.mlp_proj.forward(d, proj_, b.fch_gelu, N);
    d.residual_forward(b.res3, b.res2, proj_, static_cast<std::int64_t>(N) * C);
    residual = b.res3;
  }
  ln_f_.forward(d, lnf_, lnf_mean_, lnf_rstd_, residual, N);
  // LM head: logits[N,Vp] = lnf[N,C] · head[Vp,C]^T (padded rows of head are zero)
  d.gemm(false, true, N, Vp_, C, 1.0f, lnf_, C, head_w_, C, 0.0f, logits_, Vp_);
  if (!targets) return 0.0f;

  d.crossentropy_forward(losses_, lse_, logits_, targets_, N, V, Vp_);
  d.copy(host_losses_.data(), losses_, sizeof(float) * static_cast<std::size_t>(N),
         CopyKind::device_to_host);
  double sum = 0;  // double: the mean of thousands of losses stays exact to fp32
  for (int i = 0; i < N; ++i) sum += host_losses_[i];
  return static_cast<float>(sum / N);
}

void GptModel::backward(float dloss) {
  DTRAIN_CHECK(have_targets_, Errc::invalid_argument,
               "backward() needs a forward() with targets first");
  const int B = last_B_, T = last_T_, N = B * T, C = cfg_.d_model, V = cfg_.vocab,
            NH = cfg_.heads;
  const std::int64_t NC = static_cast<std::int64_t>(N) * C;
  Device& d = *dev_;
  auto zero = [&](float* p, std::int64_t n) { d.zero(p, sizeof(float) * n); };

  // loss = mean over N positions, so each position's loss gets dloss / N
  d.fill(dlosses_, dloss / static_cast<float>(N), N);
  // dlogits overwrite the logits in place (they are not needed any more)
  d.crossentropy_backward(logits_, logits_, lse_, targets_, dlosses_, N, V, Vp_);
  float* dlogits = logits_;
  // LM head: dlnf[N,C] = dlogits · head;  dhead[Vp,C] += dlogits^T · lnf
  d.gemm(false, false, N, C, Vp_, 1.0f, dlogits, Vp_, head_w_, C, 0.0f, dln_, C);
  d.gemm(true, false, Vp_, C, N, 1.0f, dlogits, Vp_, lnf_, C, 1.0f, head_dw_, C);

  // dres_ carries d(residual stream) down through the blocks; layernorm backward adds into it
  zero(dres_, NC);
  const float* last = blocks_.empty() ? encoded_ : blocks_.back().res3;
  ln_f_.backward(d, dres_, dln_, last, lnf_mean_, lnf_rstd_, N);
  grads_ready(0);

  for (int l = cfg_.layers - 1; l >= 0; --l) {
    Block& b = blocks_[l];
    const float* res_in = l == 0 ? encoded_ : blocks_[l - 1].res3;
    // MLP: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2))))
    zero(dfch_gelu_, 4 * NC);
    b.mlp_proj.backward(d, dfch_gelu_, dres_, b.fch_gelu, N);
    zero(dfch_, 4 * NC);
    d.gelu_backward(dfch_, b.fch, dfch_gelu_, 4 * NC);
    zero(dln_, NC);
    b.c_fc.backward(d, dln_, dfch_, b.ln2, N);
    b.ln_2.backward(d, dres_, dln_, b.res2, b.ln2_mean, b.ln2_rstd, N);  // dres_ is now d(res2)
    // attention: res2 = res_in + c_proj(attn(c_attn(ln_1(res_in))))
    zero(datty_, NC);
    b.attn_proj.backward(d, datty_, dres_, b.atty, N);
    zero(dqkv_, 3 * NC);
    d.attention_backward(dqkv_, att_ws_, datty_, b.qkv, b.att, B, T, C, NH);
    zero(dln_, NC);
    b.c_attn.backward(d, dln_, dqkv_, b.ln1, N);
    b.ln_1.backward(d, dres_, dln_, res_in, b.ln1_mean, b.ln1_rstd, N);  // d(res_in)
    grads_ready(static_cast<std::size_t>(cfg_.layers - l));
  }
  d.embedding_backward(dwte_, dres_, tokens_, N, C, 0, V);
  d.positional_backward(dwpe_, dres_, B, T, C);
  grads_ready(grad_ready_ranges_.size() - 1);
}

double GptModel::flops_per_token() const noexcept {
  const double L = cfg_.layers, C = cfg_.d_model, V = cfg_.vocab, T = cfg_.seq_len;
  const double matmul_params = L * 12.0 * C * C + V * C;  // blocks + LM head
  return 6.0 * matmul_params + 12.0 * L * C * T;
}

}  // namespace dtrain
