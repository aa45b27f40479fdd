#include "dtrain/parallel/gradient_sync.hpp"

#include <numeric>

#include "dtrain/core/error.hpp"
#include "dtrain/core/timer.hpp"

namespace dtrain::parallel {

GradientSync::GradientSync(Communicator& dp, float* grads, const std::vector<Range>& ready_ranges,
                           std::size_t bucket_bytes, GradReduction mode)
    : dp_(dp),
      grads_(grads),
      mode_(mode),
      buckets_(plan_buckets(ready_ranges, bucket_bytes)),
      bucket_of_range_(ready_ranges.size(), -1) {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (int r : buckets_[b].ranges) bucket_of_range_[r] = static_cast<int>(b);
    piece_counts_.push_back(split_evenly(buckets_[b].numel(), dp.size()));
    const auto& counts = piece_counts_.back();
    const std::size_t before =
        std::accumulate(counts.begin(), counts.begin() + dp.rank(), std::size_t{0});
    if (mode_ == GradReduction::reduce_scatter) {
      owned_.push_back({buckets_[b].first + before, buckets_[b].first + before + counts[dp.rank()]});
    } else {
      owned_.push_back({buckets_[b].first, buckets_[b].last});
    }
  }
  for (std::size_t i = 0; i < ready_ranges.size(); ++i) {
    range_by_first_[ready_ranges[i].first] = static_cast<int>(i);
  }
  pending_ranges_.assign(buckets_.size(), 0);
  launched_.assign(buckets_.size(), false);
  in_flight_.resize(buckets_.size());
}

void GradientSync::begin(bool sync) {
  sync_ = sync;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    pending_ranges_[b] = static_cast<int>(buckets_[b].ranges.size());
    launched_[b] = false;
  }
}

void GradientSync::ready(std::size_t first, std::size_t) {
  if (!sync_) return;
  const auto it = range_by_first_.find(first);
  DTRAIN_CHECK(it != range_by_first_.end(), Errc::internal,
               "gradient range starting at " << first << " is not a planned range");
  const int b = bucket_of_range_[it->second];
  if (--pending_ranges_[b] == 0) launch(static_cast<std::size_t>(b));
  poll();
}

void GradientSync::launch(std::size_t b) {
  const Bucket& bucket = buckets_[b];
  float* base = grads_ + bucket.first;
  if (mode_ == GradReduction::all_reduce) {
    in_flight_[b] = dp_.iall_reduce(base, base, bucket.numel(), DType::f32, ReduceOp::avg);
  } else {
    // In place, NCCL style: this rank's averaged piece lands at its own place in the arena.
    in_flight_[b] = dp_.ireduce_scatter_v(base, grads_ + owned_[b].first,
                                          piece_counts_[b].data(), DType::f32, ReduceOp::avg);
  }
  launched_[b] = true;
}

void GradientSync::poll() {
  for (Request& r : in_flight_) {
    if (r.valid()) r.test();
  }
}

void GradientSync::finish() {
  if (!sync_) return;
  Stopwatch watch;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (!launched_[b]) launch(b);  // ranges a model never reported (none for GptModel)
  }
  for (Request& r : in_flight_) r.wait();
  wait_seconds_ = watch.seconds();
}

void GradientSync::all_gather(float* params) {
  if (mode_ != GradReduction::reduce_scatter) return;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    dp_.all_gather_v(params + owned_[b].first, params + buckets_[b].first, piece_counts_[b].data(),
                     DType::f32);
  }
}

}  // namespace dtrain::parallel
