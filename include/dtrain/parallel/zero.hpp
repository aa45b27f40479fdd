#pragma once
// ZeRO partitioning helpers: which optimiser segments a rank owns.
#include <vector>

#include "dtrain/export.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/parallel/buckets.hpp"

namespace dtrain::parallel {

// One optimiser segment per parameter (its span in the arena, its decay rule).
DTRAIN_API std::vector<optim::Segment> parameter_segments(const ParameterStore& params);

// The parts of those segments inside `owned` (arena ranges this rank updates under ZeRO);
// a parameter cut by a shard boundary keeps its decay rule on both sides.
DTRAIN_API std::vector<optim::Segment> owned_segments(const ParameterStore& params,
                                                      const std::vector<Range>& owned);

}  // namespace dtrain::parallel
