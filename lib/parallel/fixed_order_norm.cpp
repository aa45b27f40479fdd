#include "dtrain/parallel/fixed_order_norm.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain::parallel {

namespace {
constexpr std::size_t kBlock = ParameterStore::kUnitAlignFloats;
}

FixedOrderNorm::FixedOrderNorm(Device& dev, Communicator& dp, const ParameterStore& params,
                               std::vector<bool> counted)
    : dev_(dev),
      dp_(dp),
      params_(params),
      counted_(std::move(counted)),
      partials_((params.numel() + kBlock - 1) / kBlock) {
  DTRAIN_CHECK(counted_.size() == params.infos().size(), Errc::invalid_argument,
               "FixedOrderNorm: one flag per parameter");
}

double FixedOrderNorm::sum_squares(const float* grads, const std::vector<Range>& held,
                                   bool whole) {
  // The runs (a counted parameter's elements within one block) in the order their squares
  // are added to the block partials, summed by the device in one go.
  run_starts_.clear();
  run_lengths_.clear();
  run_blocks_.clear();
  const auto& infos = params_.infos();
  for (const Range& r : held) {
    DTRAIN_CHECK(r.first % kBlock == 0, Errc::internal,
                 "gradient piece at " << r.first << " does not start on a norm block");
    for (std::size_t i = 0; i < infos.size(); ++i) {
      if (!counted_[i]) continue;
      const std::size_t lo = std::max(r.first, infos[i].offset);
      const std::size_t hi = std::min(r.second, infos[i].offset + infos[i].numel);
      for (std::size_t at = lo; at < hi;) {
        const std::size_t block = at / kBlock;
        const std::size_t end = std::min(hi, (block + 1) * kBlock);
        run_starts_.push_back(static_cast<std::int64_t>(at));
        run_lengths_.push_back(static_cast<std::int64_t>(end - at));
        run_blocks_.push_back(block);
        at = end;
      }
    }
  }
  run_sums_.resize(run_starts_.size());
  dev_.sum_squares_runs(grads, run_starts_.data(), run_lengths_.data(), run_starts_.size(),
                        run_sums_.data());
  std::fill(partials_.begin(), partials_.end(), 0.0);
  for (std::size_t i = 0; i < run_sums_.size(); ++i) partials_[run_blocks_[i]] += run_sums_[i];
  if (!whole && dp_.size() > 1) {
    dp_.all_reduce(partials_.data(), partials_.data(), partials_.size(), DType::f64, ReduceOp::sum);
  }
  double total = 0;
  for (double p : partials_) total += p;
  return total;
}

}  // namespace dtrain::parallel
