// GptModel::decode: generation with a key/value cache. Each block's c_attn writes the new
// rows' q|k|v straight into its cache rows; a text's first rows attend among themselves with
// attention_forward (the causal square), later rows with attention_decode over the cache.
// Sequence parallelism is not used: every TP rank holds the whole residual rows, and the
// row-parallel outputs are summed with an all-reduce, as without it.
#include <algorithm>
#include <cstdint>
#include <string>

#include "dtrain/core/error.hpp"
#include "dtrain/nn/gpt.hpp"
#include "nn/gpt_block.hpp"

namespace dtrain {

void GptModel::allocate_decode_cache() {
  const std::size_t T = cfg_.seq_len, C = cfg_.d_model, Cl = C_local_, Fl = hidden_local_;
  const std::size_t att = dev_->attention_saved_floats(1, cfg_.seq_len, C_local_, heads_local_);
  const std::size_t workspace = std::max(dev_->attention_workspace_floats(cfg_.seq_len),
                                         static_cast<std::size_t>(heads_local_) * T);
  auto cache = std::make_unique<DecodeCache>();
  DecodeCache& c = *cache;
  c.att_floats = att;
  c.qkv.resize(blocks_.size());
  std::vector<std::pair<float**, std::size_t>> want = {
      {reinterpret_cast<float**>(&c.tokens), T},  // int32, float-sized
      {&c.x, T * C}, {&c.ln, T * C}, {&c.mean, T}, {&c.rstd, T}, {&c.atty, T * Cl},
      {&c.att, att}, {&c.workspace, workspace}, {&c.proj, T * C}, {&c.fch, T * Fl},
      {&c.fch_gelu, T * Fl}, {&c.logits, static_cast<std::size_t>(ce_.shard.padded_rows)}};
  for (float*& qkv : c.qkv) want.push_back({&qkv, T * 3 * Cl});
  auto round = [](std::size_t n) { return (n + 15) / 16 * 16; };  // 64-byte boundaries
  std::size_t total = 0;
  for (const auto& w : want) total += round(w.second);
  c.buffer = DeviceBuffer(*dev_, sizeof(float) * total);
  float* at = c.buffer.as<float>();
  for (const auto& w : want) {
    *w.first = at;
    at += round(w.second);
  }
  decode_ = std::move(cache);
}

void GptModel::decode_reset() noexcept {
  if (decode_) decode_->length = 0;
}

int GptModel::decoded_length() const noexcept { return decode_ ? decode_->length : 0; }

const float* GptModel::decode(const std::int32_t* tokens, int n) {
  DTRAIN_CHECK(chunks_.size() == 1 && stage_.embedding && stage_.head &&
                   stage_.layers == cfg_.layers,
               Errc::invalid_config, "decoding needs the whole model (no pipeline stages)");
  const int p = decoded_length(), T = cfg_.seq_len, V = cfg_.vocab;
  DTRAIN_CHECK(n > 0 && p + n <= T, Errc::invalid_argument,
               "decode: " << n << " more tokens after " << p << " exceed seq-len " << T);
  for (int i = 0; i < n; ++i) {
    DTRAIN_CHECK(tokens[i] >= 0 && tokens[i] < V, Errc::invalid_argument,
                 "token " << tokens[i] << " outside [0, " << V << ")");
  }
  // The attention's saved size follows the GEMM operand format: make the scratch anew for a
  // new text if it changed since.
  const std::size_t att = dev_->attention_saved_floats(1, T, C_local_, heads_local_);
  if (!decode_ || (p == 0 && decode_->att_floats != att)) allocate_decode_cache();
  DTRAIN_CHECK(decode_->att_floats == att, Errc::invalid_argument,
               "decode: the GEMM operand format changed in the middle of a text");
  DecodeCache& c = *decode_;
  Device& d = *dev_;
  const int C = cfg_.d_model, C3 = 3 * C_local_, Vl = ce_.shard.padded_rows;
  const std::int64_t nC = static_cast<std::int64_t>(n) * C;
  d.copy(c.tokens, tokens, sizeof(std::int32_t) * static_cast<std::size_t>(n),
         CopyKind::host_to_device);

  // Embedding as in forward(): this rank's vocabulary rows, wpe rows p.. on rank 0, summed.
  acquire(embedding_unit(), block_unit(0));
  wte_.forward(d, c.x, c.tokens, n);
  if (tp_.rank() == 0)
    d.positional_forward(c.x, wpe_ + static_cast<std::int64_t>(p) * C, 1, n, C);
  release(embedding_unit());
  tp_.all_reduce(c.x, static_cast<std::size_t>(nC));

  const int layers = static_cast<int>(blocks_.size());
  for (int l = 0; l < layers; ++l) {
    Block& b = blocks_[l];
    acquire(block_unit(l), l + 1 < layers ? block_unit(l + 1) : head_unit());
    float* qkv = c.qkv[l];
    b.ln_1.forward(d, c.ln, c.mean, c.rstd, c.x, n);
    b.c_attn.forward(d, qkv + static_cast<std::int64_t>(p) * C3, c.ln, n);
    if (p == 0) {
      d.attention_forward(c.atty, c.att, c.workspace, qkv, 1, n, C_local_, heads_local_);
    } else {
      for (int i = 0; i < n; ++i) {
        d.attention_decode(c.atty + static_cast<std::int64_t>(i) * C_local_, c.workspace,
                           qkv + static_cast<std::int64_t>(p + i) * C3, qkv + C_local_,
                           qkv + 2 * C_local_, p + i + 1, C_local_, heads_local_, C3);
      }
    }
    b.attn_proj.forward(d, c.proj, c.atty, n);
    tp_.all_reduce(c.proj, static_cast<std::size_t>(nC));
    d.accumulate(c.x, c.proj, nC);
    b.ln_2.forward(d, c.ln, c.mean, c.rstd, c.x, n);
    b.c_fc.forward(d, c.fch, c.ln, n);
    d.gelu_forward(c.fch_gelu, c.fch, static_cast<std::int64_t>(n) * hidden_local_);
    b.mlp_proj.forward(d, c.proj, c.fch_gelu, n);
    tp_.all_reduce(c.proj, static_cast<std::size_t>(nC));
    d.accumulate(c.x, c.proj, nC);
    release(block_unit(l));
  }

  // ln_f and this rank's vocabulary rows of the LM head, for the last row only.
  const int tied = cfg_.tie_embeddings ? embedding_unit() : -1;  // head_w_ is wte
  acquire(head_unit(), tied);
  acquire(tied, -1);
  ln_f_.forward(d, c.ln, c.mean, c.rstd, c.x + static_cast<std::int64_t>(n - 1) * C, 1);
  d.gemm(false, true, 1, Vl, C, 1.0f, c.ln, C, head_w_, C, 0.0f, c.logits, Vl);
  release(tied);
  release(head_unit());
  c.length = p + n;
  return c.logits;
}

}  // namespace dtrain
