// GptModel::decode: generation with a key/value cache. Each block's c_attn writes the new
// rows' q|k|v straight into its cache rows; a text's first rows attend among themselves with
// attention_forward (the causal square), later rows with attention_decode over the cache.
// Sequence parallelism is not used: every TP rank holds the whole residual rows, and the
// row-parallel outputs are summed with an all-reduce, as without it. A pipeline stage runs
// its chunks one by one (decode_chunk), each keeping the length of the text its blocks hold.
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
  c.length.assign(chunks_.size(), 0);
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
  if (decode_) std::fill(decode_->length.begin(), decode_->length.end(), 0);
}

int GptModel::decoded_length() const noexcept { return decode_ ? decode_->length.front() : 0; }

float* GptModel::decode_input() {
  reserve_decode(/*new_text=*/false);
  return decode_->x;
}

void GptModel::reserve_decode(bool new_text) {
  // The attention's saved size follows the GEMM operand format: the scratch is made anew
  // (holding no text) for a new text if it changed since.
  const std::size_t att = dev_->attention_saved_floats(1, cfg_.seq_len, C_local_, heads_local_);
  if (decode_ && decode_->att_floats == att) return;
  DTRAIN_CHECK(new_text || !decode_ ||
                   std::all_of(decode_->length.begin(), decode_->length.end(),
                               [](int l) { return l == 0; }),
               Errc::invalid_argument,
               "decode: the GEMM operand format changed in the middle of a text");
  allocate_decode_cache();
}

const float* GptModel::decode(const std::int32_t* tokens, int n) {
  DTRAIN_CHECK(chunks_.size() == 1 && stage_.embedding && stage_.head, Errc::invalid_config,
               "decode() needs the whole model; a pipeline stage decodes chunk by chunk "
               "(decode_chunk)");
  return decode_chunk(0, tokens, nullptr, n);
}

const float* GptModel::decode_chunk(int chunk, const std::int32_t* tokens, const float* input,
                                    int n) {
  DTRAIN_CHECK(chunk >= 0 && chunk < chunks(), Errc::invalid_argument,
               "decode: chunk " << chunk << " outside [0, " << chunks() << ")");
  const bool emb = chunks_[chunk].embedding, head = chunks_[chunk].head;
  DTRAIN_CHECK(emb ? tokens != nullptr : input != nullptr, Errc::invalid_argument,
               "decode needs " << (emb ? "tokens" : "the chunk's input rows"));
  reserve_decode(/*new_text=*/false);
  DecodeCache& c = *decode_;
  const int p = c.length[static_cast<std::size_t>(chunk)], T = cfg_.seq_len, V = cfg_.vocab;
  DTRAIN_CHECK(n > 0, Errc::invalid_argument, "decode: at least one token, got " << n);
  DTRAIN_CHECK(n <= T - p, Errc::invalid_argument,
               "decode: " << n << " more tokens after " << p << " exceed seq-len " << T);
  for (int i = 0; emb && i < n; ++i) {
    DTRAIN_CHECK(tokens[i] >= 0 && tokens[i] < V, Errc::invalid_argument,
                 "token " << tokens[i] << " outside [0, " << V << ")");
  }
  Device& d = *dev_;
  const int C = cfg_.d_model, C3 = 3 * C_local_, Vl = ce_.shard.padded_rows;
  const std::int64_t nC = static_cast<std::int64_t>(n) * C;
  const int l0 = chunk_begin_[chunk], l1 = chunk_begin_[chunk + 1];  // this chunk's blocks

  if (emb) {  // as in forward(): this rank's vocabulary rows, wpe rows p.. on rank 0, summed
    d.copy(c.tokens, tokens, sizeof(std::int32_t) * static_cast<std::size_t>(n),
           CopyKind::host_to_device);
    acquire(embedding_unit(), block_unit(l0));
    wte_.forward(d, c.x, c.tokens, n);
    if (tp_.rank() == 0)
      d.positional_forward(c.x, wpe_ + static_cast<std::int64_t>(p) * C, 1, n, C);
    release(embedding_unit());
    tp_.all_reduce(c.x, static_cast<std::size_t>(nC));
  } else if (input != c.x) {
    d.copy_floats(c.x, input, nC);  // the previous piece's output rows
  }

  for (int l = l0; l < l1; ++l) {
    Block& b = blocks_[l];
    acquire(block_unit(l), l + 1 < l1 ? block_unit(l + 1) : (head ? head_unit() : -1));
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

  c.length[static_cast<std::size_t>(chunk)] = p + n;
  if (!head) return c.x;

  // ln_f and this rank's vocabulary rows of the LM head, for the last row only.
  const int tied = cfg_.tie_embeddings ? embedding_unit() : -1;  // head_w_ is wte
  acquire(head_unit(), tied);
  acquire(tied, -1);
  ln_f_.forward(d, c.ln, c.mean, c.rstd, c.x + static_cast<std::int64_t>(n - 1) * C, 1);
  d.gemm(false, true, 1, Vl, C, 1.0f, c.ln, C, head_w_, C, 0.0f, c.logits, Vl);
  release(tied);
  release(head_unit());
  return c.logits;
}

}  // namespace dtrain
