#pragma once
// GPT-2-style decoder-only transformer: token + learned position embeddings, `layers`
// pre-LayerNorm blocks (causal multi-head attention, GELU MLP of width 4C), final LayerNorm,
// LM head tied to wte unless tie_embeddings is false. See docs/model.md for names, shapes,
// initialisation and the FLOP count, docs/tensor-parallel.md for the tensor-parallel layout.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "dtrain/core/dtype.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/nn/layers.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/nn/tensor_parallel.hpp"

namespace dtrain {

struct DTRAIN_API GptConfig {
  int layers = 4;
  int heads = 4;
  int d_model = 256;
  int seq_len = 256;
  int vocab = 256;
  bool tie_embeddings = true;
  // How the blocks' saved activations are kept (LayerNorm outputs, qkv, attention output and
  // probabilities, the MLP's hidden layer before and after GELU; not the residual stream or
  // LayerNorm statistics): f32, or bf16/f16 (half the bytes; the forward still computes them
  // in fp32, and backward reads the rounded values). Mixed precision sets it.
  DType saved_activations = DType::f32;
  // Activation recomputation: forward keeps only each block's output (the residual stream,
  // R x C floats a block), and backward runs a block's forward again from its input before
  // its backward (up to the MLP's hidden layer; the last linear layer's output is not
  // needed). The same gradients, bit for bit, as keeping fp32 activations; saved_activations
  // is then moot. Costs the recomputed forward: 8 of the block's 12 C^2 GEMM columns (by
  // 2 N flops) and the attention, a fifth more than a training step's GEMMs.
  bool recompute = false;

  // Throws Error(Errc::invalid_config) with a message naming the command-line option.
  void validate() const;
  // Throws Error(Errc::invalid_config) when the model cannot be split over tp ranks: heads,
  // d-model and 4*d-model must be divisible by tp, vocab at least tp, and with sequence
  // parallelism seq-len divisible by tp. Needs no communication.
  void validate_tp(int tp, bool sequence_parallel) const;
  // The largest d-model and vocabulary validate() takes: 4 d-model and the padded vocabulary
  // are GEMM dimensions, which are int.
  static constexpr int kMaxDModel = 1 << 28;
  static constexpr int kMaxVocab = 1 << 30;
  // Vocabulary rounded up to a multiple of kVocabPad: the row count of wte / lm_head storage
  // and the column count of the logits. Padding never affects the loss.
  static constexpr int kVocabPad = 64;
  int padded_vocab() const { return (vocab + kVocabPad - 1) / kVocabPad * kVocabPad; }
  // Parameters of the whole model on one rank (no tensor or pipeline split; the vocabulary
  // padded), known before any model is built: a rank's arena holds at most these plus the
  // alignment between its tensors and units (a few KiB a unit).
  std::size_t parameter_count() const;
  // The model's parameters as docs/model.md counts them (the vocabulary unpadded): 124 439 808
  // for GPT-2 124M.
  std::size_t logical_parameter_count() const;
};

// The part of the model a pipeline stage holds; the default is the whole model. Layers keep
// their global names (h.<first_layer + i>.*) and every weight its single-process value.
struct DTRAIN_API GptStage {
  int first_layer = 0;
  int layers = -1;        // blocks held; -1: all from first_layer on
  bool embedding = true;  // wte/wpe lookup: the first stage
  bool head = true;       // ln_f, LM head and loss: the last stage (holds wte too when tied)
  // Micro-batches whose activations are kept at once (a pipeline schedule's in-flight count
  // for this stage), each in its own slot, so backward never recomputes a forward.
  int slots = 1;
};

class DTRAIN_API GptModel {
 public:
  // Allocates parameters, gradients and every activation buffer once, for up to max_batch
  // sequences of cfg.seq_len tokens, and initialises the weights from seed.
  // tp: the tensor-parallel group, borrowed for the model's lifetime (null = a group of one:
  // the plain model). Attention is split by heads, the MLP by its 4*d-model hidden units and
  // wte (and lm_head) by vocabulary rows; every logical weight starts bit-identical to the
  // single-process model's. sequence_parallel: LayerNorm and residual regions run on shards
  // of the B*T rows (ignored on a group of one). Invalid splits throw
  // Error(Errc::invalid_config) on every rank before any communication.
  GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
           Communicator* tp = nullptr, bool sequence_parallel = false);
  // One pipeline stage of the model (see GptStage); throws Error(Errc::invalid_config) when
  // the layer range lies outside cfg.layers or is empty.
  GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
           const GptStage& stage, Communicator* tp = nullptr, bool sequence_parallel = false);
  // Several layer chunks in one model (one parameter arena): an interleaved pipeline rank
  // holds chunk c = piece c*pp + rank. Chunks are listed in layer order; only the first may
  // hold the embedding, only the last the head; each keeps its own activation slots.
  // weights = init_grads_deferred: the weights are written, the gradient arena holds nothing
  // (ParameterStore::allocate) and the caller restores the pieces it keeps, so that a ZeRO-2
  // rank never holds all the gradients. deferred: neither arena holds anything and no weight
  // is written; the caller restores the pieces it keeps and calls init_weights() for them,
  // so that a ZeRO-3 rank never holds the whole model.
  enum class Weights { init, init_grads_deferred, deferred };
  GptModel(const GptConfig& cfg, Device& dev, std::uint64_t seed, int max_batch,
           const std::vector<GptStage>& chunks, Communicator* tp = nullptr,
           bool sequence_parallel = false, Weights weights = Weights::init);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  ParameterStore& parameters() noexcept { return params_; }
  const ParameterStore& parameters() const noexcept { return params_; }
  // GPT-2's initial weights from seed, keyed by logical element (any layout and any subset
  // gets the values of the whole model); only: just the elements in these arena ranges.
  void init_weights(std::uint64_t seed, const ParameterStore::ArenaRanges* only = nullptr);

  // tokens, targets: host arrays [B, T] of int32 in [0, vocab) (T <= seq_len, B <= max_batch).
  // Returns the mean cross-entropy over the B*T positions and keeps the activations for
  // backward. targets may be null (inference): the logits are computed and 0 is returned.
  // Collective over the TP group (all ranks pass the same tokens and targets); with sequence
  // parallelism B*T must be divisible by the TP size.
  float forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T);
  // Accumulates (+=) d(objective)/d(params) into parameters().grads(), where dloss is
  // d(objective)/d(mean loss of the last forward), which must have had targets: one backward
  // a forward (it overwrites the logits with their gradient; a second throws invalid_argument).
  // The caller zeroes the gradients. Collective over the TP group. Afterwards (and for each range when the grad-ready hook
  // reports it) every replicated parameter (tp_sharded false) has the same complete gradient
  // on every TP rank, and every sharded one the complete gradient of its slice: only the
  // data-parallel reduction is left to the caller.
  void backward(float dloss);
  // Pipeline stages. forward_stage runs chunk `chunk` on one micro-batch, keeping its
  // activations in slot `slot` (< that chunk's slots) for the backward_stage of the same
  // (chunk, slot); slots are independent, so micro-batches may go backward in any order.
  // The embedding chunk reads tokens, any other chunk `input`, the residual stream rows held
  // here ([B*T, C], or [B*T/tp, C] with sequence parallelism; device memory, copied in
  // unless it is stage_input(chunk, slot)). The head chunk needs targets and returns the
  // mean loss; other chunks return 0 and leave their output in stage_output() (same shape
  // as input, valid until the next forward into the same slot). backward_stage takes dloss
  // on the head chunk and d(objective)/d(its output) (`doutput`) on any other, accumulates
  // parameter gradients like backward(), and on a non-embedding chunk leaves
  // d(objective)/d(input) in input_grad() (valid until the next backward). On the whole
  // model forward_stage/backward_stage are forward/backward.
  float forward_stage(const std::int32_t* tokens, const std::int32_t* targets,
                      const float* input, int B, int T, int chunk = 0, int slot = 0);
  void backward_stage(float dloss, const float* doutput, int chunk = 0, int slot = 0);
  const float* stage_output() const noexcept { return stage_out_; }
  const float* input_grad() const noexcept { return dres_; }
  // Where forward_stage(chunk, slot) keeps its input: receiving into it saves a copy.
  float* stage_input(int chunk, int slot);
  // All chunks together: first_layer of the first, layers of all, embedding/head anywhere.
  const GptStage& stage() const noexcept { return stage_; }
  int chunks() const noexcept { return static_cast<int>(chunks_.size()); }
  const GptStage& chunk(int c) const { return chunks_.at(static_cast<std::size_t>(c)); }
  // Floats of one stage boundary tensor for B sequences of T tokens (rows held here x C).
  std::size_t boundary_floats(int B, int T) const noexcept;

  // Logits of the last forward, device memory of shape [B, T, vocab_shard().padded_rows]:
  // column j is token vocab_shard().start + j for j < vocab_shard().rows, padding after it
  // (without TP: [B, T, padded_vocab()]). Valid until the next backward() (which reuses it).
  // Null after a forward with targets under 16-bit GEMM operands and the whole vocabulary
  // here (head_writes_logits16), whose logits exist only as 16-bit words for the loss.
  const float* logits() const noexcept { return logits_are_words_ ? nullptr : logits_; }

  // Called during backward() with arena element ranges [first, last) of parameters().grads()
  // whose gradients are final for this backward, in the order they complete (LM head and
  // ln_f, then each block from the last to the first, then the embeddings). Data
  // parallelism uses it to reduce a bucket while backward goes on.
  using GradReadyHook = std::function<void(std::size_t first, std::size_t last)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_hook_ = std::move(hook); }
  // Called during backward() with the same ranges before backward first writes into each
  // (a range may be announced more than once): ZeRO 2/3 restore the gradient memory they
  // handed back after the last reduction (Device::restore).
  void set_grad_write_hook(GradReadyHook hook) { grad_write_hook_ = std::move(hook); }
  // The ranges in the order the hook reports them; together they tile the arena.
  const std::vector<std::pair<std::size_t, std::size_t>>& grad_ready_ranges() const noexcept {
    return grad_ready_ranges_;
  }
  // Parameter units: the same arena ranges as grad_ready_ranges() (index = unit). With
  // hooks set, forward and backward call acquire(unit, next) before reading a unit's
  // parameters and release(unit) when done; `next` is the unit this pass acquires after it
  // (-1: none), so its gather can start early. ZeRO-3 keeps only a shard of each unit and
  // gathers it in acquire. Pairs nest (the tied LM head holds the embedding unit too).
  struct ParamUseHooks {
    std::function<void(int unit, int next)> acquire;
    std::function<void(int unit)> release;
  };
  void set_param_use_hooks(ParamUseHooks hooks) { param_hooks_ = std::move(hooks); }
  // Called between the large ops of every block and of the LM head, forward and backward,
  // so that non-blocking collectives in flight (gradient buckets, prefetched ZeRO-3 units)
  // advance while the block computes: MPI moves a large message only while a rank is
  // inside the library.
  void set_progress_hook(std::function<void()> hook) { progress_hook_ = std::move(hook); }
  // Generation with a key/value cache, one text at a time. On a model that holds every
  // layer, the embedding and the head (no pipeline stages), decode(tokens, n) runs the model
  // over n more tokens of the text the cache holds (at most seq_len tokens in all; the first
  // call after decode_reset() starts a new text) and returns the logits of the last of them:
  // device memory, one row of vocab_shard().padded_rows floats laid out as in logits(),
  // valid until the next decode. The cache keeps every block's q|k|v rows of the text, so a
  // token costs a forward over one row instead of over the whole text; the logits are those
  // forward() gives that position, up to rounding. Collective over the TP group (every rank
  // passes the same tokens); rows are not split by sequence parallelism. Throws
  // Error(Errc::invalid_argument) on tokens outside the vocabulary or past seq_len. The
  // first call allocates the cache (per block seq_len x 3 d_model / tp floats) and the
  // scratch of one sequence; it is kept for the next text.
  const float* decode(const std::int32_t* tokens, int n);
  // Allocates decode()'s cache now where decode() would (at its first call, or for a text
  // after the GEMM operand format changed; new_text: the next decode starts one), so a
  // caller whose decode is collective can agree on running out of memory before it starts.
  void reserve_decode(bool new_text);
  void decode_reset() noexcept;
  int decoded_length() const noexcept;  // tokens of the text held (by chunk 0)
  // decode() on a pipeline stage, one chunk at a time in pipeline order: the embedding chunk
  // reads tokens, any other chunk `input` (the previous piece's output rows, n x d_model
  // floats of device memory, copied in unless it is decode_input()). The head chunk returns
  // the logits, any other chunk its output rows for the next piece (device memory, valid
  // until the next decode call). On the whole model decode_chunk(0, tokens, nullptr, n) is
  // decode(tokens, n).
  const float* decode_chunk(int chunk, const std::int32_t* tokens, const float* input, int n);
  float* decode_input();  // where a chunk's input rows may be received (saves a copy)

  // Per-position losses of the last forward (device memory, [B, T]).
  const float* losses() const noexcept { return losses_; }

  // Bytes of this rank's activation allocation (saved activations of every slot and shared
  // scratch); allocated once, so it is also the peak.
  std::size_t activation_bytes() const noexcept { return act_bytes_; }
  // Forward + backward model FLOPs per token: 6 * (matmul parameters) + 12 * layers *
  // d_model * seq_len (attention scores and mixing); see docs/model.md. For the whole
  // model, whatever the tensor-parallel split.
  double flops_per_token() const noexcept;
  const GptConfig& config() const noexcept { return cfg_; }
  int max_batch() const noexcept { return max_batch_; }
  // Throws invalid_argument unless a forward of B x T tokens fits: B in [1, max_batch], T in
  // [1, seq_len], B*T divisible by the TP size under sequence parallelism.
  void check_batch_shape(int B, int T) const;
  Device& device() const noexcept { return *dev_; }

  int tp_size() const noexcept { return tp_.size(); }
  int tp_rank() const noexcept { return tp_.rank(); }
  bool sequence_parallel() const noexcept { return sp_; }
  const nn::VocabShard& vocab_shard() const noexcept { return ce_.shard; }
  // Collectives this model issued over its TP group (counts and bytes, see TpCommStats).
  const nn::TpCommStats& tp_comm_stats() const noexcept { return tp_.stats(); }
  void reset_tp_comm_stats() noexcept { tp_.reset_stats(); }

 private:
  struct Block;
  struct ChunkActivations;  // where each (chunk, slot) keeps its saved activations
  struct DecodeCache;       // decode()'s q|k|v rows and scratch
  void allocate_decode_cache();
  bool has_wte() const noexcept { return stage_.embedding || (stage_.head && cfg_.tie_embeddings); }
  void declare_parameters();
  void bind_parameters();  // points the layers at their tensors in the arenas
  void allocate_activations();
  // Points the saved-activation members (encoded_, each block's ln1 ... res3, logits_, ...)
  // of `chunk` at `slot`, and returns that slot's bookkeeping.
  struct SlotUse {
    int B = 0, T = 0;
    bool targets = false;
  };
  SlotUse& bind_slot(int chunk, int slot);
  void bind_layernorm_grads();
  void reduce_layernorm_grads(std::size_t first, std::size_t count);
  // The tensor-parallel region boundaries (conjugate pairs, see lib/nn/tp_comm.hpp), over
  // R = rows of the residual stream here (B*T, or B*T/tp with sequence parallelism).
  const float* enter_region_fwd(const float* x_rows, int R);
  float* enter_region_bwd(float* dx_full, int N, int R);
  const float* leave_region_fwd(float* y_partial, float* out_rows, int N, int R);
  const float* leave_region_bwd(const float* dy_rows, int R);
  void plan_grad_ready_ranges();
  void grads_ready(std::size_t index) const;  // reports backward's index-th range (if held)
  void grads_writing(std::size_t index) const;  // announces it before the first write
  // Parameter units by role (-1 when this stage holds none), and the hook calls.
  int head_unit() const noexcept { return ready_index_.front(); }
  int block_unit(int l) const noexcept { return ready_index_[1 + (stage_.layers - 1 - l)]; }
  int embedding_unit() const noexcept { return ready_index_.back(); }
  void acquire(int unit, int next) const;
  void release(int unit) const;
  void progress() const { if (progress_hook_) progress_hook_(); }
  // A block's forward from `residual`, for a micro-batch of B sequences of T tokens. to_output
  // false (recomputation) stops once backward's inputs are there, before the MLP's c_proj.
  void block_forward(Block& b, const float* residual, int B, int T, bool to_output);
  // GptConfig::saved_activations in 16 bits: keep the rounded copies of a block's saved
  // activations after its forward / read them back into the fp32 scratch before its
  // backward (no-ops for f32 and with recomputation), for a micro-batch of B sequences.
  static constexpr std::size_t kKept16 = 7;  // tensors per block: Block::kept16()
  std::array<std::int64_t, kKept16> kept16_numel(int B) const;
  bool keeps_16bit() const { return cfg_.saved_activations != DType::f32 && !cfg_.recompute; }
  // keep_16bit / restore_16bit leave out the entries reads_kept16() serves.
  void keep_16bit(Block& b, int B) const;
  void restore_16bit(Block& b, int B) const;
  // Whether the device reads kept 16-bit copies as they are (its 16-bit gemm_operand_format is
  // the saved activations' format): the four linear layers' inputs are rounded into their
  // copies as soon as they are computed and are those layers' GEMM operands both ways
  // (forward does not round them again, backward does not widen them only to round them
  // again), and the attention's and GELU's backward read their inputs' copies (qkv, the
  // attention output, the MLP's hidden layer); the same values bit for bit. Only the
  // attention's saved statistics are widened. Not with sequence parallelism, where
  // c_attn's and c_fc's input is gathered over the group.
  bool reads_kept16() const;
  // Whether the head's logit gradient goes straight into 16-bit words (dlogits16_) for the LM
  // head's GEMMs, never fp32 in memory (Device::crossentropy_backward_16bit).
  bool head_reads_dlogits16() const;
  // Whether, under 16-bit GEMM operands with the whole vocabulary here, a forward with targets
  // has the LM head's GEMM write the logits as 16-bit words (logit_words(), in logits_'s
  // place), which the loss reads and backward overwrites with their gradient's words for the
  // head's GEMMs: never fp32 in memory, and no dlogits16_.
  bool head_writes_logits16() const;
  std::uint16_t* logit_words() const;
  // Where the LayerNorms' output gradient (dln_) is 16-bit words, which the linear layers'
  // GEMMs write and the LayerNorms' backward reads (as autocast hands a bf16 gradient on):
  // under reads_kept16() with one rank in the TP group (more would sum fp32 over the group),
  // else null.
  std::uint16_t* ln_grad_words() const;
  // The buffers are sized at construction by the device's GEMM operand format: the attention's
  // saved floats (Device::attention_saved_floats; the CUDA device's fused attention saves far
  // less) and, under reads_kept16(), no fp32 scratch for the kept tensors read as words.
  // Refuse to run once the format no longer gives the same, which would overrun them.
  void check_operand_format_unchanged() const;
  std::size_t att_saved_floats_ = 0;  // per block, for max_batch_ sequences
  bool kept16_at_build_ = false;      // reads_kept16() when the activations were sized

  GptConfig cfg_;
  GptStage stage_;                  // summary of chunks_
  std::vector<GptStage> chunks_;
  std::vector<int> chunk_begin_;    // blocks_ index of each chunk's first block, then the end
  std::vector<int> block_layer_;    // global layer index of each block
  std::vector<ChunkActivations> chunk_acts_;
  Device* dev_;
  int max_batch_;
  nn::TpGroup tp_;
  bool sp_ = false;
  int C_local_ = 0, heads_local_ = 0, hidden_local_ = 0;  // attention width, heads, 4C / tp
  ParameterStore params_;
  std::vector<Block> blocks_;
  nn::LayerNorm ln_f_;
  nn::VocabParallelEmbedding wte_;
  nn::VocabParallelEmbedding lm_head_;  // used only when embeddings are untied
  nn::VocabParallelCrossEntropy ce_;
  float *wpe_ = nullptr, *dwpe_ = nullptr;
  float *head_w_ = nullptr, *head_dw_ = nullptr;  // wte when tied, lm_head.weight otherwise

  // activations (one device allocation, carved once)
  GradReadyHook grad_ready_hook_;
  GradReadyHook grad_write_hook_;
  ParamUseHooks param_hooks_;
  std::function<void()> progress_hook_;
  std::vector<std::pair<std::size_t, std::size_t>> grad_ready_ranges_;
  std::vector<int> ready_index_;  // backward's report k -> its range in grad_ready_ranges_

  DeviceBuffer act_buf_;
  std::size_t act_bytes_ = 0;
  std::int32_t *tokens_ = nullptr, *targets_ = nullptr;
  float *encoded_ = nullptr, *proj_ = nullptr, *lnf_ = nullptr, *lnf_mean_ = nullptr,
        *lnf_rstd_ = nullptr, *logits_ = nullptr, *lse_ = nullptr, *losses_ = nullptr,
        *dlosses_ = nullptr;
  // 16-bit saved activations (GptConfig::saved_activations): the fp32 values of one block
  // live here while it computes, each block keeps the rounded copies (Block::kept16()); under
  // reads_kept16() only the attention's statistics have fp32 values (the others are null:
  // their ops write and read the copies alone)
  std::array<float*, kKept16> kept16_scratch_{};
  // GptConfig::recompute: every block computes in the shared scratch (kept16_scratch_ and
  // these, Block::internal()); only its output stays per block.
  std::array<float*, 5> internal_scratch_{};
  // gradient scratch shared by all layers
  float *dres_ = nullptr, *dln_ = nullptr, *dqkv_ = nullptr, *datty_ = nullptr, *dfch_ = nullptr,
        *dfch_gelu_ = nullptr, *att_ws_ = nullptr, *ce_scratch_ = nullptr;
  // The head's logit gradient as 16-bit words, which the LM head's GEMMs read (held where the
  // device multiplied 16-bit operands when the model was built; null otherwise).
  float* dlogits16_ = nullptr;
  bool logits_are_words_ = false;  // the last forward's logits: logit_words() (logits())
  // sequence parallelism: gathered LayerNorm output, gathered ln_f output (the LM head input),
  // gathered residual gradient, a gradient shard of the residual rows, and the LayerNorm
  // gradients of one backward (summed over the group before they join the arena)
  float *gather_ = nullptr, *lnf_full_ = nullptr, *dres_full_ = nullptr, *dln_rows_ = nullptr,
        *ln_grads_ = nullptr;
  std::vector<std::pair<float*, float*>> ln_grad_targets_;  // (arena, scratch), C floats each
  std::vector<float> host_losses_;

  const float* stage_out_ = nullptr;  // residual stream after the last block of the chunk
  std::unique_ptr<DecodeCache> decode_;  // made by the first decode()
};

}  // namespace dtrain
