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

// ZeRO 2/3 pieces of a unit (or bucket) of `numel` elements: split over `parts` ranks at
// page boundaries (ParameterStore::kUnitAlignFloats), the one-page-longer pieces starting
// at rank `index` mod parts so that the extra pages spread over the ranks unit by unit.
DTRAIN_API std::vector<std::size_t> shard_piece_counts(std::size_t numel, int parts,
                                                       std::size_t index);

}  // namespace dtrain::parallel
