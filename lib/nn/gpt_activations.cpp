// GptModel's activations: the one device allocation holding the scratch shared by every
// micro-batch and each chunk's saved activations per slot, binding a slot, and keeping the
// saved activations in 16 bits (GptConfig::saved_activations).
#include "dtrain/nn/gpt.hpp"

#include <cstdint>

#include "dtrain/core/error.hpp"
#include "nn/gpt_block.hpp"

namespace dtrain {

std::array<std::int64_t, GptModel::kKept16> GptModel::kept16_numel(int B) const {
  const std::int64_t N = static_cast<std::int64_t>(B) * cfg_.seq_len, T = cfg_.seq_len;
  const std::int64_t R = sp_ ? N / tp_.size() : N, C = cfg_.d_model, Cl = C_local_;
  const auto att = static_cast<std::int64_t>(dev_->attention_saved_floats(B, T, Cl, heads_local_));
  const std::int64_t hidden = N * hidden_local_;
  return {R * C, N * 3 * Cl, N * Cl, att, R * C, hidden, hidden};
}

void GptModel::check_operand_format_unchanged() const {
  const std::size_t now =
      dev_->attention_saved_floats(max_batch_, cfg_.seq_len, C_local_, heads_local_);
  DTRAIN_CHECK(now == att_saved_floats_, Errc::invalid_argument,
               "the device's attention now saves " << now << " floats per block where this model "
               "holds " << att_saved_floats_ << " (its GEMM operand format changed after the "
               "model was built; set it first, and keep it while the model lives)");
  DTRAIN_CHECK(reads_kept16() == kept16_at_build_, Errc::invalid_argument,
               "the model's 16-bit saved activations were sized for "
               << (kept16_at_build_ ? "16-bit" : "fp32") << " GEMM operands (the device's GEMM "
               "operand format changed after the model was built; set it first, and keep it "
               "while the model lives)");
}

bool GptModel::reads_kept16() const {
  return keeps_16bit() && !sp_ && dev_->gemm_operand_format() == cfg_.saved_activations;
}

bool GptModel::head_writes_logits16() const {
  return stage_.head && tp_.size() == 1 && dev_->gemm_operand_format() != DType::f32;
}

std::uint16_t* GptModel::logit_words() const { return reinterpret_cast<std::uint16_t*>(logits_); }

std::uint16_t* GptModel::ln_grad_words() const {
  return reads_kept16() && tp_.size() == 1 ? reinterpret_cast<std::uint16_t*>(dln_) : nullptr;
}

bool GptModel::head_reads_dlogits16() const {
  return dlogits16_ != nullptr && dev_->gemm_operand_format() != DType::f32;
}

void GptModel::keep_16bit(Block& b, int B) const {
  if (!keeps_16bit()) return;
  const auto numel = kept16_numel(B);
  const auto kept = b.kept16();
  const bool kept_already = reads_kept16();
  for (std::size_t i = 0; i < kKept16; ++i) {
    if (kept_already && Block::kKeptByForward[i]) continue;
    dev_->convert_to_16bit(reinterpret_cast<std::uint16_t*>(*kept[i].second), *kept[i].first,
                           numel[i], cfg_.saved_activations);
  }
}

void GptModel::restore_16bit(Block& b, int B) const {
  if (!keeps_16bit()) return;
  const auto numel = kept16_numel(B);
  const auto kept = b.kept16();
  const bool read_as_kept = reads_kept16();
  for (std::size_t i = 0; i < kKept16; ++i) {
    if (read_as_kept && Block::kReadAsKept[i]) continue;
    dev_->convert_from_16bit(*kept[i].first, reinterpret_cast<const std::uint16_t*>(*kept[i].second),
                             numel[i], cfg_.saved_activations);
  }
}
void GptModel::allocate_activations() {
  const int P = tp_.size();
  const std::size_t N = static_cast<std::size_t>(max_batch_) * cfg_.seq_len;
  const std::size_t R = sp_ ? (N + P - 1) / P : N;  // residual-stream rows kept here
  const std::size_t C = cfg_.d_model;
  const std::size_t Cl = C_local_, Fl = hidden_local_;
  const std::size_t Vl = stage_.head ? static_cast<std::size_t>(ce_.shard.padded_rows) : 0;
  att_saved_floats_ = dev_->attention_saved_floats(max_batch_, cfg_.seq_len, C_local_, heads_local_);
  auto round = [](std::size_t n) { return (n + 15) / 16 * 16; };  // 64-byte boundaries
  // One allocation: the scratch shared by every micro-batch, then per chunk its saved
  // activations of one micro-batch, repeated per slot.
  struct Want {
    float** ptr;
    std::size_t n;
  };
  std::vector<Want> scratch;
  auto want = [&](float*& p, std::size_t n) { scratch.push_back({&p, n}); };
  want(proj_, N * C);  // partial sums of the row-parallel layers and the embedding
  want(dlosses_, N);
  if (P > 1) want(ce_scratch_, nn::VocabParallelCrossEntropy::scratch_floats(N));
  want(dres_, R * C);
  want(dln_, N * C);
  want(dqkv_, N * 3 * Cl);
  want(datty_, N * Cl);
  want(dfch_, N * Fl);
  want(dfch_gelu_, N * Fl);
  want(att_ws_, dev_->attention_workspace_floats(cfg_.seq_len));
  const bool half = keeps_16bit(), recompute = cfg_.recompute;
  const auto kept_numel = kept16_numel(max_batch_);
  kept16_at_build_ = reads_kept16();
  if (half || recompute) {  // the blocks' fp32 values, but none of those only ever words
    for (std::size_t i = 0; i < kKept16; ++i) {
      if (kept16_at_build_ && Block::kReadAsKept[i]) continue;
      want(kept16_scratch_[i], static_cast<std::size_t>(kept_numel[i]));
    }
  }
  const std::size_t internal_numel[] = {R, R, R * C, R, R};  // Block::internal()'s order
  if (recompute) {
    for (std::size_t i = 0; i < internal_scratch_.size(); ++i) want(internal_scratch_[i], internal_numel[i]);
  }
  auto halves = [](std::size_t n) { return (n + 1) / 2; };  // 16-bit values, in floats
  if (stage_.head && dev_->gemm_operand_format() != DType::f32 && !head_writes_logits16())
    want(dlogits16_, halves(N * Vl));
  if (sp_) {
    want(gather_, N * C);
    want(dres_full_, N * C);
    want(dln_rows_, R * C);
    want(ln_grads_, 2 * C * (2 * blocks_.size() + (stage_.head ? 1 : 0)));
  }
  std::size_t total = 0;
  for (const Want& w : scratch) total += round(w.n);

  chunk_acts_.resize(chunks_.size());
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    ChunkActivations& a = chunk_acts_[c];
    std::size_t at = 0;
    auto keep = [&](float*& p, std::size_t n) {
      a.fields.push_back({&p, at});
      at += round(n);
    };
    if (chunks_[c].embedding) {  // int32 ids in float-sized places
      a.tokens_at = at;
      at += round(N);
    }
    if (chunks_[c].head) {
      a.targets_at = at;
      at += round(N);
    }
    keep(encoded_, R * C);
    for (int l = chunk_begin_[c]; l < chunk_begin_[c + 1]; ++l) {
      Block& b = blocks_[static_cast<std::size_t>(l)];
      if (!recompute) {
        const auto kept = b.kept16();  // fp32, or their 16-bit copies
        for (std::size_t i = 0; i < kKept16; ++i) {
          const auto n = static_cast<std::size_t>(kept_numel[i]);
          if (half) {
            keep(*kept[i].second, halves(n));
          } else {
            keep(*kept[i].first, n);
          }
        }
        const auto internal = b.internal();
        for (std::size_t i = 0; i < internal.size(); ++i) keep(*internal[i], internal_numel[i]);
      }
      keep(b.res3, R * C);  // the next block's input
    }
    if (chunks_[c].head) {
      keep(lnf_, R * C);
      keep(lnf_mean_, R);
      keep(lnf_rstd_, R);
      keep(logits_, N * Vl);
      keep(lse_, N);
      keep(losses_, N);
      if (sp_) keep(lnf_full_, N * C);  // the LM head input, needed again by backward
    }
    a.stride = at;
    a.use.resize(static_cast<std::size_t>(chunks_[c].slots));
    total += at * a.use.size();
  }

  act_bytes_ = total * sizeof(float);
  act_buf_ = DeviceBuffer(*dev_, act_bytes_);
  float* base = act_buf_.as<float>();
  for (const Want& w : scratch) {
    *w.ptr = base;
    base += round(w.n);
  }
  for (ChunkActivations& a : chunk_acts_) {
    a.base = base;
    base += a.stride * a.use.size();
  }
  if (half || recompute) {  // every block computes in the shared fp32 scratch
    for (Block& b : blocks_) {
      const auto kept = b.kept16();
      for (std::size_t i = 0; i < kKept16; ++i) *kept[i].first = kept16_scratch_[i];
      if (!recompute) continue;
      const auto internal = b.internal();
      for (std::size_t i = 0; i < internal.size(); ++i) *internal[i] = internal_scratch_[i];
    }
  }
  ce_.scratch = ce_scratch_;
  host_losses_.resize(N);
  for (int c = chunks() - 1; c >= 0; --c) bind_slot(c, 0);  // chunk 0 bound, as before
}

GptModel::SlotUse& GptModel::bind_slot(int chunk, int slot) {
  DTRAIN_CHECK(chunk >= 0 && chunk < chunks(), Errc::invalid_argument,
               "chunk " << chunk << " outside [0, " << chunks() << ")");
  ChunkActivations& a = chunk_acts_[static_cast<std::size_t>(chunk)];
  DTRAIN_CHECK(slot >= 0 && slot < static_cast<int>(a.use.size()), Errc::invalid_argument,
               "activation slot " << slot << " outside [0, " << a.use.size() << ") of chunk "
                                  << chunk);
  float* s = a.base + a.stride * static_cast<std::size_t>(slot);
  for (const auto& f : a.fields) *f.first = s + f.second;
  if (chunks_[chunk].embedding) tokens_ = reinterpret_cast<std::int32_t*>(s + a.tokens_at);
  if (chunks_[chunk].head) targets_ = reinterpret_cast<std::int32_t*>(s + a.targets_at);
  return a.use[static_cast<std::size_t>(slot)];
}

float* GptModel::stage_input(int chunk, int slot) {
  bind_slot(chunk, slot);
  return encoded_;
}

}  // namespace dtrain
