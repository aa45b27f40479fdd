#include "dtrain/core/error.hpp"
#include "dtrain/train/data.hpp"

namespace dtrain::train {

std::uint64_t BatchPlan::global_batch() const {
  return static_cast<std::uint64_t>(micro_batch) * dp_size * accum_steps;
}

std::uint64_t BatchPlan::first_sample(std::uint64_t step, int micro) const {
  return step * global_batch() + static_cast<std::uint64_t>(micro) * micro_batch * dp_size +
         static_cast<std::uint64_t>(dp_rank) * micro_batch;
}

BatchLoader::BatchLoader(const TokenSource& source, BatchPlan plan, int seq_len)
    : source_(source), plan_(plan), seq_len_(seq_len), scratch_(new std::int32_t[seq_len + 1]) {
  DTRAIN_CHECK(plan.micro_batch > 0 && plan.dp_size > 0 && plan.accum_steps > 0 &&
                   plan.dp_rank >= 0 && plan.dp_rank < plan.dp_size,
               Errc::invalid_argument, "invalid batch plan");
}

void BatchLoader::load(Split split, std::uint64_t first_sample, std::int32_t* tokens,
                       std::int32_t* targets) {
  for (int b = 0; b < plan_.micro_batch; ++b) {
    source_.sample(split, first_sample + b, seq_len_ + 1, scratch_.get());
    for (int t = 0; t < seq_len_; ++t) {
      tokens[b * seq_len_ + t] = scratch_[t];
      targets[b * seq_len_ + t] = scratch_[t + 1];
    }
  }
}

}  // namespace dtrain::train
