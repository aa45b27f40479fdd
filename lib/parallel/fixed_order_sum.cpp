#include "dtrain/parallel/fixed_order_sum.hpp"

#include "dtrain/core/error.hpp"
#include "dtrain/parallel/buckets.hpp"

namespace dtrain::parallel {

FixedOrderSum::FixedOrderSum(Device& dev, Communicator& dp, std::size_t numel,
                             int local_micro_batches)
    : dev_(dev),
      dp_(dp),
      numel_(numel),
      local_(local_micro_batches),
      chunk_counts_(split_evenly(numel, dp.size())),
      slots_(dev, sizeof(float) * numel * local_micro_batches),
      inbox_(dev, sizeof(float) * chunk_counts_[dp.rank()] * local_micro_batches * dp.size()),
      all_losses_(static_cast<std::size_t>(local_micro_batches) * dp.size()) {
  DTRAIN_CHECK(local_micro_batches > 0, Errc::invalid_argument, "no micro-batches to sum");
  std::size_t start = 0;
  for (std::size_t c : chunk_counts_) {
    chunk_starts_.push_back(start);
    start += c;
  }
  requests_.reserve(2 * static_cast<std::size_t>(local_micro_batches) * dp.size());
}

void FixedOrderSum::sum(float* out) {
  const int P = dp_.size(), me = dp_.rank();
  const std::size_t mine = chunk_counts_[me];
  float* inbox = inbox_.as<float>();
  // inbox piece k = m*P + p holds chunk `me` of rank p's local micro-batch m.
  requests_.clear();
  for (int m = 0; m < local_; ++m) {
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      requests_.push_back(dp_.irecv(inbox + (m * P + p) * mine, mine, DType::f32, p, m));
      requests_.push_back(dp_.isend(slot(m) + chunk_starts_[p], chunk_counts_[p], DType::f32, p, m));
    }
    dev_.copy_floats(inbox + (m * P + me) * mine, slot(m) + chunk_starts_[me],
                     static_cast<std::int64_t>(mine));
  }
  for (Request& r : requests_) r.wait();
  float* acc = out + chunk_starts_[me];
  dev_.copy_floats(acc, inbox, static_cast<std::int64_t>(mine));
  for (int k = 1; k < local_ * P; ++k) dev_.accumulate(acc, inbox + k * mine, static_cast<std::int64_t>(mine));
  dp_.all_gather_v(acc, out, chunk_counts_.data(), DType::f32);
}

double FixedOrderSum::sum_losses(const double* local_losses) {
  const int P = dp_.size();
  // Gathered rank-major: rank p's local m sits at p*local_ + m; fold in k = m*P + p order.
  dp_.all_gather(local_losses, all_losses_.data(), static_cast<std::size_t>(local_), DType::f64);
  double total = 0;
  for (int m = 0; m < local_; ++m)
    for (int p = 0; p < P; ++p) total += all_losses_[static_cast<std::size_t>(p) * local_ + m];
  return total;
}

}  // namespace dtrain::parallel
