#pragma once
// GptModel's private parts shared by its source files: a transformer block (its layers and
// the pointers to its saved activations) and the per-chunk activation layout.
#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "dtrain/nn/gpt.hpp"
#include "dtrain/nn/layers.hpp"
#include "dtrain/nn/tensor_parallel.hpp"

namespace dtrain {

struct GptModel::Block {
  nn::LayerNorm ln_1, ln_2;
  nn::ColumnParallelLinear c_attn, c_fc;   // split by output (heads / hidden units)
  nn::RowParallelLinear attn_proj, mlp_proj;  // split by input; outputs are partial sums
  // saved activations; ln*, res* hold the R rows of the residual stream kept here
  float *ln1 = nullptr, *ln1_mean = nullptr, *ln1_rstd = nullptr, *qkv = nullptr,
        *atty = nullptr, *att = nullptr, *res2 = nullptr, *ln2 = nullptr, *ln2_mean = nullptr,
        *ln2_rstd = nullptr, *fch = nullptr, *fch_gelu = nullptr, *res3 = nullptr;
  // 16-bit saved activations: rounded copies (uint16 values in float-sized places) of the
  // tensors kept16() lists, which then point at the shared fp32 scratch
  float *ln1_16 = nullptr, *qkv16 = nullptr, *atty16 = nullptr, *att16 = nullptr,
        *ln2_16 = nullptr, *fch16 = nullptr, *fch_gelu16 = nullptr;
  // (fp32 value, rounded copy) of every tensor kept in 16 bits, in GptModel::kept16_numel's
  // order. The residual stream (res2, res3) and the LayerNorm statistics stay fp32.
  std::array<std::pair<float**, float**>, kKept16> kept16() {
    return {{{&ln1, &ln1_16},
             {&qkv, &qkv16},
             {&atty, &atty16},
             {&att, &att16},
             {&ln2, &ln2_16},
             {&fch, &fch16},
             {&fch_gelu, &fch_gelu16}}};
  }
  // Which kept16() entries the device reads as their 16-bit copies under
  // GptModel::reads_kept16: all but the attention's saved statistics (att): the linear
  // layers' inputs (ln1, atty, ln2, fch_gelu) and the attention's (qkv, which c_attn's GEMM
  // writes), written by block_forward as soon as computed and read by both directions, and
  // GELU's (fch, which c_fc's GEMM writes), read by GELU both ways.
  static constexpr std::array<bool, kKept16> kReadAsKept{true, true, true, false, true, true, true};
  // Of those, the ones block_forward keeps itself (the others: keep_16bit at the block's end).
  static constexpr std::array<bool, kKept16> kKeptByForward{true, true, true, false, true, true, true};
  // The other saved activations a block's backward reads besides its input: with
  // recomputation, these and the kept16() values live in the shared scratch.
  std::array<float**, 5> internal() { return {&ln1_mean, &ln1_rstd, &res2, &ln2_mean, &ln2_rstd}; }
};

// The saved activations of one chunk for one micro-batch form a fixed layout, repeated once
// per slot: binding a slot points the members named in `fields` at that slot's copy.
struct GptModel::ChunkActivations {
  std::vector<std::pair<float**, std::size_t>> fields;  // (member, offset in floats)
  std::size_t tokens_at = 0, targets_at = 0;            // int32 ids (if held), in floats
  std::size_t stride = 0;                               // floats of one slot
  float* base = nullptr;                                // slot 0
  std::vector<SlotUse> use;                             // per slot
};

// decode()'s state: every block's q|k|v rows of the text so far ([seq_len, 3 C/tp], row t
// the projections of position t, read by attention_decode in place) and the scratch of one
// forward over up to seq_len new rows, all in one allocation.
struct GptModel::DecodeCache {
  DeviceBuffer buffer;
  std::vector<float*> qkv;  // per block
  std::int32_t* tokens = nullptr;
  float *x = nullptr, *ln = nullptr, *mean = nullptr, *rstd = nullptr, *atty = nullptr,
        *att = nullptr, *workspace = nullptr, *proj = nullptr, *fch = nullptr,
        *fch_gelu = nullptr, *logits = nullptr;
  std::size_t att_floats = 0;  // Device::attention_saved_floats when it was allocated
  std::vector<int> length;     // per chunk: tokens of the text its blocks hold
};

}  // namespace dtrain
