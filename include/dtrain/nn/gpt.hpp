#pragma once
// GPT-2-style decoder-only transformer: token + learned position embeddings, `layers`
// pre-LayerNorm blocks (causal multi-head attention, GELU MLP of width 4C), final LayerNorm,
// LM head tied to wte unless tie_embeddings is false. See docs/model.md for names, shapes,
// initialisation and the FLOP count.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/nn/layers.hpp"
#include "dtrain/nn/parameters.hpp"

namespace dtrain {

struct DTRAIN_API GptConfig {
  int layers = 4;
  int heads = 4;
  int d_model = 256;
  int seq_len = 256;
  int vocab = 256;
  bool tie_embeddings = true;

  // Throws Error(Errc::invalid_config) with a message naming the command-line option.
  void validate() const;
  // Vocabulary rounded up to a multiple of kVocabPad: the row count of wte / lm_head storage
  // and the column count of the logits. Padding never affects the loss.
  static constexpr int kVocabPad = 64;
  int padded_vocab() const { return (vocab + kVocabPad - 1) / kVocabPad * kVocabPad; }
};

class DTRAIN_API GptModel {
 public:
  // Allocates parameters, gradients and every activation buffer once, for up to max_batch
  // sequences of cfg.seq_len tokens, and initialises the weights from seed.
  GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  ParameterStore& parameters() noexcept { return params_; }
  const ParameterStore& parameters() const noexcept { return params_; }

  // tokens, targets: host arrays [B, T] of int32 in [0, vocab) (T <= seq_len, B <= max_batch).
  // Returns the mean cross-entropy over the B*T positions and keeps the activations for
  // backward. targets may be null (inference): the logits are computed and 0 is returned.
  float forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T);
  // Accumulates (+=) d(objective)/d(params) into parameters().grads(), where dloss is
  // d(objective)/d(mean loss of the last forward). The caller zeroes the gradients.
  void backward(float dloss);
  // Logits of the last forward, device memory of shape [B, T, padded_vocab()]; columns
  // >= vocab are padding. Valid until the next backward() (which reuses the buffer).
  const float* logits() const noexcept { return logits_; }

  // Called during backward() with arena element ranges [first, last) of parameters().grads()
  // whose gradients are final for this backward, in the order they complete (LM head and
  // ln_f, then each block from the last to the first, then the embeddings). Data
  // parallelism uses it to reduce a bucket while backward goes on.
  using GradReadyHook = std::function<void(std::size_t first, std::size_t last)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_hook_ = std::move(hook); }
  // The ranges in the order the hook reports them; together they tile the arena.
  const std::vector<std::pair<std::size_t, std::size_t>>& grad_ready_ranges() const noexcept {
    return grad_ready_ranges_;
  }
  // Per-position losses of the last forward (device memory, [B, T]).
  const float* losses() const noexcept { return losses_; }

  std::size_t activation_bytes() const noexcept { return act_bytes_; }
  // Forward + backward model FLOPs per token: 6 * (matmul parameters) + 12 * layers *
  // d_model * seq_len (attention scores and mixing); see docs/model.md.
  double flops_per_token() const noexcept;
  const GptConfig& config() const noexcept { return cfg_; }
  int max_batch() const noexcept { return max_batch_; }
  Device& device() const noexcept { return *dev_; }

 private:
  struct Block;
  void declare_parameters();
  void init_parameters(std::uint64_t seed);
  void allocate_activations();
  void plan_grad_ready_ranges();
  void grads_ready(std::size_t index) const;  // reports grad_ready_ranges_[index] to the hook

  GptConfig cfg_;
  Device* dev_;
  int max_batch_;
  int Vp_;
  ParameterStore params_;
  std::vector<Block> blocks_;
  nn::LayerNorm ln_f_;
  nn::Linear lm_head_;  // used only when embeddings are untied
  float *wte_ = nullptr, *dwte_ = nullptr, *wpe_ = nullptr, *dwpe_ = nullptr;
  float *head_w_ = nullptr, *head_dw_ = nullptr;  // wte when tied, lm_head.weight otherwise

  // activations (one device allocation, carved once)
  GradReadyHook grad_ready_hook_;
  std::vector<std::pair<std::size_t, std::size_t>> grad_ready_ranges_;

  DeviceBuffer act_buf_;
  std::size_t act_bytes_ = 0;
  std::int32_t *tokens_ = nullptr, *targets_ = nullptr;
  float *encoded_ = nullptr, *proj_ = nullptr, *lnf_ = nullptr, *lnf_mean_ = nullptr,
        *lnf_rstd_ = nullptr, *logits_ = nullptr, *lse_ = nullptr, *losses_ = nullptr,
        *dlosses_ = nullptr;
  // gradient scratch shared by all layers
  float *dres_ = nullptr, *dln_ = nullptr, *dqkv_ = nullptr, *datty_ = nullptr, *dfch_ = nullptr,
        *dfch_gelu_ = nullptr, *att_ws_ = nullptr;
  std::vector<float> host_losses_;

  int last_B_ = 0, last_T_ = 0;
  bool have_targets_ = false;
};

}  // namespace dtrain
