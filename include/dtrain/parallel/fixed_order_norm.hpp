#pragma once
// The gradient's sum of squares in a fixed order, for --deterministic: the same bits
// whatever the data-parallel degree and ZeRO stage. The arena is cut into blocks of
// ParameterStore::kUnitAlignFloats elements; a block's partial sums the squares of its
// counted parameters' elements (parameters in arena order), and the partials are added in
// block order. ZeRO pieces are cut at block boundaries, so each block lies in one rank's
// piece: summing the partials over the group, where every block has one non-zero
// contribution, is exact.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/nn/parameters.hpp"
#include "dtrain/parallel/buckets.hpp"

namespace dtrain::parallel {

class DTRAIN_API FixedOrderNorm {
 public:
  // counted[i]: parameter i (store order) contributes (e.g. not a copy another rank counts).
  FixedOrderNorm(Device& dev, Communicator& dp, const ParameterStore& params,
                 std::vector<bool> counted);

  // Sum of squares of the counted gradients. held: the arena ranges this rank has final
  // gradients for; whole = every rank holds them all (then nothing is communicated), else
  // each rank holds its own pieces and the partials are summed over dp.
  double sum_squares(const float* grads, const std::vector<Range>& held, bool whole);

 private:
  Device& dev_;
  Communicator& dp_;
  const ParameterStore& params_;
  std::vector<bool> counted_;
  std::vector<double> partials_;  // per block
  // One step's runs (reused, so they stop growing after the first step)
  std::vector<std::int64_t> run_starts_, run_lengths_;
  std::vector<std::size_t> run_blocks_;
  std::vector<double> run_sums_;
};

}  // namespace dtrain::parallel
