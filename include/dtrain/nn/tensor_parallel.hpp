#pragma once
// Tensor parallelism (Megatron-style): the TP group a model runs over, how the vocabulary is
// split over it, the column-, row- and vocabulary-parallel layers, and the TP-global gradient
// norm. Every piece takes the group explicitly; a group of one (no communicator) makes the
// layers plain layers and every collective a no-op. See docs/tensor-parallel.md.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/nn/parameters.hpp"

namespace dtrain::nn {

// Collectives a model issued over its TP group (group-of-one calls are not counted).
struct DTRAIN_API TpCommStats {
  std::uint64_t all_reduces = 0;
  std::uint64_t all_gathers = 0;
  std::uint64_t reduce_scatters = 0;
  // Bytes of the whole tensor of each collective (all-reduce: its buffer; all-gather and
  // reduce-scatter: the gathered or scattered full tensor): the volume Megatron's formulas
  // count.
  std::uint64_t tensor_bytes = 0;
  // Bytes a bandwidth-optimal (ring) algorithm sends from each rank: 2(p-1)/p of the tensor
  // for an all-reduce, (p-1)/p for an all-gather or a reduce-scatter.
  std::uint64_t ring_bytes = 0;
};
DTRAIN_API TpCommStats operator-(const TpCommStats& a, const TpCommStats& b);

// A tensor-parallel group: a borrowed Communicator (null = a group of one) and the device
// whose memory the buffers live in. All collectives are over fp32 and counted.
class DTRAIN_API TpGroup {
 public:
  TpGroup(Communicator* comm, Device& dev);

  int size() const noexcept { return size_; }
  int rank() const noexcept { return rank_; }
  Communicator* comm() const noexcept { return comm_; }

  // x[n] = op over the group of x[n], in place.
  void all_reduce(float* x, std::size_t n, ReduceOp op = ReduceOp::sum);
  // full[size() * shard_n] = the shards of every rank, in rank order (out of place).
  void all_gather(const float* shard, float* full, std::size_t shard_n);
  // shard[shard_n] = block rank() of the sum over the group of full[size() * shard_n].
  void reduce_scatter(const float* full, float* shard, std::size_t shard_n);

  const TpCommStats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = TpCommStats{}; }

 private:
  void count(std::uint64_t& calls, std::size_t tensor_elems, double ring_fraction);
  Communicator* comm_;
  Device* dev_;
  int size_ = 1, rank_ = 0;
  TpCommStats stats_;
};

// The vocabulary rows one TP rank holds: tokens [start, start + rows). The vocabulary is split
// as evenly as possible (the first vocab % tp ranks get one row more), so every rank holds at
// least one real row when vocab >= tp; each shard is stored padded to padded_rows (the largest
// shard rounded up to a multiple of pad, the same on every rank). Padding rows are never part
// of the softmax, so they cannot change the loss.
struct DTRAIN_API VocabShard {
  int start = 0;
  int rows = 0;
  int padded_rows = 0;
};
DTRAIN_API VocabShard vocab_shard(int vocab, int tp_size, int tp_rank, int pad = 64);

// y_local[N, out/p] = x[N, in] · W_local^T + b_local. Logical W [out, in], b [out]; rank r holds
// output rows [r*out/p, (r+1)*out/p). With parts > 1 the output is `parts` equal blocks (q|k|v
// of attention) and each block is split alike, so a rank keeps whole heads of q, k and v and
// its local output is q_local|k_local|v_local. x must be the full input on every rank; the
// input gradient of backward is this rank's partial sum (reduce it over the group). x16, in
// both layers: x rounded to the GEMM operand format where the caller has it
// (Device::linear_forward's inp16; backward's x may then be null, as there).
struct DTRAIN_API ColumnParallelLinear {
  std::string prefix;
  int in = 0, out = 0, out_local = 0, parts = 1;
  bool has_bias = true;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;

  void declare(ParameterStore& ps, const std::string& name, int in_features, int out_features,
               const TpGroup& tp, int parts = 1, bool bias = true);
  void bind(ParameterStore& ps);
  // y16: the output rounded to the GEMM operand format, written there too, or alone where
  // y_local is null (Device::linear_forward's out16).
  void forward(Device& dev, float* y_local, const float* x, int N,
               const std::uint16_t* x16 = nullptr, std::uint16_t* y16 = nullptr) const {
    dev.linear_forward(y_local, x, w, b, N, in, out_local, x16, y16);
  }
  // dx[N, in] += (or = with overwrite) this rank's part of the input gradient (dx may be null).
  // dx16: dx as 16-bit words of the GEMM operand format instead, written over
  // (Device::linear_backward's dinp16).
  void backward(Device& dev, float* dx, const float* dy_local, const float* x, int N,
                Device::GradWrite dx_write = Device::GradWrite::accumulate,
                const std::uint16_t* x16 = nullptr, std::uint16_t* dx16 = nullptr) const {
    dev.linear_backward(dx, dw, db, dy_local, x, w, N, in, out_local, dx_write, x16, nullptr,
                        dx16);
  }
  // The same from the output gradient as 16-bit words of the GEMM operand format
  // (linear_backward's dout16), whose bias gradient the caller has added into db already
  // (Device::gelu_backward_rounded, attention_backward_rounded).
  void backward_from_words(Device& dev, float* dx, const std::uint16_t* dy16, const float* x,
                           int N, Device::GradWrite dx_write = Device::GradWrite::accumulate,
                           const std::uint16_t* x16 = nullptr,
                           std::uint16_t* dx16 = nullptr) const {
    dev.linear_backward(dx, dw, nullptr, nullptr, x, w, N, in, out_local, dx_write, x16, dy16,
                        dx16);
  }
};

// y_partial[N, out] = x_local[N, in/p] · W_local^T: logical W [out, in] split by input columns
// (rank r holds [r*in/p, (r+1)*in/p)), so the outputs of the group sum to the full output. The
// bias is replicated and only rank 0 adds it, so the sum carries it exactly once. backward
// takes the full output gradient (the same on every rank), which makes the bias gradient
// complete and identical on every rank.
struct DTRAIN_API RowParallelLinear {
  std::string prefix;
  int in = 0, in_local = 0, out = 0;
  bool has_bias = true;
  bool adds_bias = true;  // rank 0 of the group
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;

  void declare(ParameterStore& ps, const std::string& name, int in_features, int out_features,
               const TpGroup& tp, bool bias = true);
  void bind(ParameterStore& ps);
  void forward(Device& dev, float* y_partial, const float* x_local, int N,
               const std::uint16_t* x16 = nullptr) const {
    dev.linear_forward(y_partial, x_local, w, adds_bias ? b : nullptr, N, in_local, out, x16);
  }
  // y = residual + forward's output, for a group of one rank, whose output is already the full
  // sum (Device::linear_forward_residual: the GEMM may add the residual itself); a layer split
  // over several ranks is refused (each would add the residual to its partial sum).
  void forward_residual(Device& dev, float* y, const float* residual, const float* x_local,
                        int N, const std::uint16_t* x16 = nullptr) const;
  // dx_local[N, in/p] += (or = with overwrite) dy · W_local (dx_local may be null). dx16:
  // dx_local as 16-bit words of the GEMM operand format instead, written over
  // (Device::linear_backward's dinp16).
  void backward(Device& dev, float* dx_local, const float* dy, const float* x_local, int N,
                Device::GradWrite dx_write = Device::GradWrite::accumulate,
                const std::uint16_t* x16 = nullptr, std::uint16_t* dx16 = nullptr) const {
    dev.linear_backward(dx_local, dw, db, dy, x_local, w, N, in_local, out, dx_write, x16,
                        nullptr, dx16);
  }
};

// A token table [vocab, C] split by rows over the group (vocab_shard). forward writes this
// rank's rows and zeros for tokens it does not own, so a sum over the group is the lookup.
// The same table serves as the vocabulary-parallel LM head when embeddings are tied.
struct DTRAIN_API VocabParallelEmbedding {
  std::string name;
  int vocab = 0, C = 0;
  VocabShard shard;
  float *w = nullptr, *dw = nullptr;  // [shard.padded_rows, C]

  void declare(ParameterStore& ps, const std::string& param_name, int vocab_size, int channels,
               const TpGroup& tp);
  void bind(ParameterStore& ps);
  void forward(Device& dev, float* out, const std::int32_t* tokens, int N) const {
    dev.embedding_forward(out, tokens, w, N, C, shard.start, shard.rows);
  }
  // dw += dout rows of the tokens this rank owns; dout must be the full gradient.
  void backward(Device& dev, const float* dout, const std::int32_t* tokens, int N) const {
    dev.embedding_backward(dw, dout, tokens, N, C, shard.start, shard.rows);
  }
};

// Softmax cross-entropy over vocabulary-parallel logits [N, shard.padded_rows]: the row max,
// then the sum of exponentials and the target logit, are reduced over the group (two
// all-reduces of N and 2N floats); the full logits never exist on one rank. A group of one runs
// the fused single-device kernel.
struct DTRAIN_API VocabParallelCrossEntropy {
  int vocab = 0;
  VocabShard shard;
  float* scratch = nullptr;  // scratch_floats(N) floats of device memory, set by the owner

  static std::size_t scratch_floats(std::size_t N) { return 3 * N; }
  // losses[N] and lse[N] (kept for backward).
  void forward(Device& dev, TpGroup& tp, float* losses, float* lse, const float* logits,
               const std::int32_t* targets, int N) const;
  // The same from the logits as 16-bit words of the device's GEMM operand format
  // (Device::crossentropy_forward_16bit); a group of one only (a split vocabulary's passes
  // read fp32 shards).
  void forward_16bit(Device& dev, const TpGroup& tp, float* losses, float* lse,
                     const std::uint16_t* logits16, const std::int32_t* targets, int N) const;
  // dlogits[N, padded_rows] = d(sum_n dlosses[n] * losses[n]) / dlogits; may alias logits.
  void backward(Device& dev, const TpGroup& tp, float* dlogits, const float* logits,
                const float* lse, const std::int32_t* targets, const float* dlosses,
                int N) const;
  // The same gradient rounded into 16-bit words of the device's GEMM operand format
  // (Device::crossentropy_backward_16bit), for GEMMs that read it as it is; from logits16
  // (forward_16bit's, logits null; dlogits16 may alias it) where given.
  void backward_16bit(Device& dev, const TpGroup& tp, std::uint16_t* dlogits16,
                      const float* logits, const float* lse, const std::int32_t* targets,
                      const float* dlosses, int N,
                      const std::uint16_t* logits16 = nullptr) const;
};

// Sum of squares of every gradient, over the whole TP group: tp_sharded parameters are summed
// over the group, replicated ones counted once (their gradients are equal on every rank).
// Collective over tp (one all-reduce of one double); tp null = this process alone. The same
// value on every rank of the group.
DTRAIN_API double grad_sum_squares(const ParameterStore& ps, Device& dev, Communicator* tp);

}  // namespace dtrain::nn
