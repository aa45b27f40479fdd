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
// of the arena (parameters) or of a moment buffer (optimiser state).
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

struct PlanLayout {
  int dp_rank = 0, dp_size = 1;
  int tp_rank = 0;
  int pp_rank = 0;
  bool optimizer_sharded = false;  // ZeRO >= 1: the optimiser's segments are this rank's
};

// One plan per directory entry, in its order. Replicated copies (over dp, and over tp for
// tensors not split by it) are written in equal shares by the dp ranks of tp rank 0; ZeRO
// pieces of the moments by their owner; a tensor held by several pipeline stages (a tied
// wte) by its first stage only. Every stage holding a tensor reads it.
std::vector<TensorPlan> plan_io(const std::vector<TensorEntry>& directory,
                                const ParameterStore& params, const optim::AdamW& optimizer,
                                const PlanLayout& layout);

}  // namespace dtrain::ckpt
