#pragma once
// The communication of tensor parallelism as forward/backward conjugate pairs (Megatron-Core's
// mappings). Each pair enters or leaves a tensor-parallel region; the backward of one is the
// forward of its conjugate. On a group of one every collective is a no-op (or a copy between
// distinct buffers).
//
//   pair                           forward              backward
//   copy_to_region                 identity             all-reduce
//   reduce_from_region             all-reduce           identity
//   split_to_sequence              keep own rows        all-gather
//   gather_from_sequence           all-gather           reduce-scatter
//   reduce_scatter_to_sequence     reduce-scatter       all-gather
//
// Tensors are [rows, C] row-major; a sequence shard is rank r's block of rows/size() rows.
#include <cstddef>

#include "dtrain/nn/tensor_parallel.hpp"

namespace dtrain::nn::tp {

inline void copy_to_region_fwd(TpGroup&) {}
inline void copy_to_region_bwd(TpGroup& g, float* dx, std::size_t n) { g.all_reduce(dx, n); }

inline void reduce_from_region_fwd(TpGroup& g, float* y, std::size_t n) { g.all_reduce(y, n); }
inline void reduce_from_region_bwd(TpGroup&) {}

// shard[shard_n] = block rank() of full (a copy, no communication).
void split_to_sequence_fwd(TpGroup& g, Device& dev, const float* full, float* shard,
                           std::size_t shard_n);
inline void split_to_sequence_bwd(TpGroup& g, const float* dshard, float* dfull,
                                  std::size_t shard_n) {
  g.all_gather(dshard, dfull, shard_n);
}

inline void gather_from_sequence_fwd(TpGroup& g, const float* shard, float* full,
                                     std::size_t shard_n) {
  g.all_gather(shard, full, shard_n);
}
inline void gather_from_sequence_bwd(TpGroup& g, const float* dfull, float* dshard,
                                     std::size_t shard_n) {
  g.reduce_scatter(dfull, dshard, shard_n);
}

inline void reduce_scatter_to_sequence_fwd(TpGroup& g, const float* full, float* shard,
                                           std::size_t shard_n) {
  g.reduce_scatter(full, shard, shard_n);
}
inline void reduce_scatter_to_sequence_bwd(TpGroup& g, const float* dshard, float* dfull,
                                           std::size_t shard_n) {
  g.all_gather(dshard, dfull, shard_n);
}

}  // namespace dtrain::nn::tp
