#pragma once
// Which pieces of each tensor this rank reads and writes. Writes partition every logical
// tensor exactly (nothing written twice); reads cover everything the rank holds.
#include <cstddef>
#include <vector>

#include "ckpt/tensor_directory.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/optim/optimizer.hpp"

namespace dtrain::ckpt {

// Local elements [first, first + count) of a parameter's slice, stored from element `mem`
// of the arena, of the fp32 master weights (ParamSource::masters) or of a moment buffer.
struct Piece {
  std::size_t first = 0;
  std::size_t count = 0;
  std::size_t mem = 0;
};

struct TensorPlan {
  const TensorEntry* entry = nullptr;  // the tensor in the file
  const ParamInfo* param = nullptr;    // this rank's slice of it; null when its stage lacks it
  std::vector<Piece> param_read, param_write, state_read, state_write;
};

// Where this rank's parameter values are, for the file.
enum class ParamSource {
  arena,         // the arena holds every parameter of this rank's slice
  arena_pieces,  // the arena holds only the optimiser's segments (ZeRO 3): only they are
                 // written and read, at their arena offsets
  masters,       // the optimiser's fp32 master weights (mixed precision), compact like the
                 // moments: the arena holds them rounded, so the file takes the masters
};

struct PlanLayout {
  int dp_rank = 0, dp_size = 1;
  int tp_rank = 0;
  int pp_rank = 0;
  bool optimizer_sharded = false;  // ZeRO >= 1: the optimiser's segments are this rank's
  ParamSource param_source = ParamSource::arena;
};

// One plan per directory entry, in its order. Replicated copies (over dp, and over tp for
// tensors not split by it) are written in equal shares by the dp ranks of tp rank 0; ZeRO
// pieces of the moments by their owner; a tensor held by several pipeline stages (a tied
// wte) by its first stage only. Every stage holding a tensor reads it. Parameters taken
// from the optimiser's segments (ParamSource::arena_pieces, masters) are written and read
// as the moments are.
std::vector<TensorPlan> plan_io(const std::vector<TensorEntry>& directory,
                                const ParameterStore& params, const optim::AdamW& optimizer,
                                const PlanLayout& layout);

}  // namespace dtrain::ckpt
