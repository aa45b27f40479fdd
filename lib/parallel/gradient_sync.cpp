#include "dtrain/parallel/gradient_sync.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/core/timer.hpp"
#include "dtrain/parallel/zero.hpp"

namespace dtrain::parallel {

GradientSync::GradientSync(Communicator& dp, float* grads, const std::vector<Range>& ready_ranges,
                           std::size_t bucket_bytes, GradReduction mode, Device* dev)
    : dp_(dp),
      grads_(grads),
      mode_(mode),
      dev_(dev),
      buckets_(plan_buckets(ready_ranges, bucket_bytes)),
      bucket_of_range_(ready_ranges.size(), -1) {
  DTRAIN_CHECK(mode != GradReduction::shard || dev != nullptr, Errc::invalid_argument,
               "GradientSync: the shard mode needs the device");
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (int r : buckets_[b].ranges) bucket_of_range_[r] = static_cast<int>(b);
    piece_counts_.push_back(mode_ == GradReduction::shard
                                ? shard_piece_counts(buckets_[b].numel(), dp.size(), b)
                                : split_evenly(buckets_[b].numel(), dp.size()));
    const Range whole{buckets_[b].first, buckets_[b].last};
    owned_.push_back(mode_ == GradReduction::all_reduce
                         ? whole
                         : piece_of(whole, piece_counts_.back(), dp.rank()));
  }
  for (std::size_t i = 0; i < ready_ranges.size(); ++i) {
    range_by_first_[ready_ranges[i].first] = static_cast<int>(i);
  }
  pending_ranges_.assign(buckets_.size(), 0);
  launched_.assign(buckets_.size(), false);
  discarded_.assign(buckets_.size(), false);
  in_flight_.resize(buckets_.size());
  if (mode_ == GradReduction::shard) {  // hold only this rank's pieces from the start
    for (std::size_t b = 0; b < buckets_.size(); ++b) discard_others(b);
  }
}

std::size_t GradientSync::owned_numel() const noexcept {
  std::size_t n = 0;
  for (const Range& r : owned_) n += r.second - r.first;
  return n;
}

void GradientSync::begin(bool sync, bool last_micro) {
  begun_ = true;
  sync_ = sync;
  last_micro_ = last_micro;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    pending_ranges_[b] = static_cast<int>(buckets_[b].ranges.size());
    launched_[b] = false;
  }
}

void GradientSync::writing(std::size_t first, std::size_t) {
  if (mode_ != GradReduction::shard) return;
  const auto it = range_by_first_.find(first);
  DTRAIN_CHECK(it != range_by_first_.end(), Errc::invalid_argument,
               "gradient range starting at " << first << " is not a planned range");
  restore_others(static_cast<std::size_t>(bucket_of_range_[it->second]));
}

void GradientSync::writing_everything() {
  if (mode_ != GradReduction::shard) return;
  for (std::size_t b = 0; b < buckets_.size(); ++b) restore_others(b);
}

void GradientSync::ready(std::size_t first, std::size_t) {
  if (!sync_) return;
  const auto it = range_by_first_.find(first);
  DTRAIN_CHECK(it != range_by_first_.end(), Errc::invalid_argument,
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
    if (mode_ == GradReduction::shard) restore_others(b);  // a bucket nobody announced: zeros
    // In place, NCCL style: this rank's piece lands at its own place in the arena. In shard
    // mode the other ranks' pieces here were discarded after the last reduction and restored
    // as zeros before this backward, so the sum adds this micro-step's gradients of every
    // rank to the piece's running total.
    const ReduceOp op = mode_ == GradReduction::shard ? ReduceOp::sum : ReduceOp::avg;
    in_flight_[b] = dp_.ireduce_scatter_v(base, grads_ + owned_[b].first,
                                          piece_counts_[b].data(), DType::f32, op);
  }
  launched_[b] = true;
}

void GradientSync::poll() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Request& r = in_flight_[b];
    if (r.valid() && r.test() && mode_ == GradReduction::shard) discard_others(b);
  }
}

void GradientSync::discard_others(std::size_t b) {
  if (discarded_[b]) return;
  const Bucket& bucket = buckets_[b];
  const Range& mine = owned_[b];
  dev_->discard(grads_ + bucket.first, sizeof(float) * (mine.first - bucket.first));
  dev_->discard(grads_ + mine.second, sizeof(float) * (bucket.last - mine.second));
  discarded_[b] = true;
}

void GradientSync::restore_others(std::size_t b) {
  if (!discarded_[b]) return;
  const Bucket& bucket = buckets_[b];
  const Range& mine = owned_[b];
  dev_->restore(grads_ + bucket.first, sizeof(float) * (mine.first - bucket.first));
  dev_->restore(grads_ + mine.second, sizeof(float) * (bucket.last - mine.second));
  discarded_[b] = false;
}

void GradientSync::finish() {
  // Without begin() the previous step's state would decide: a step reduced nothing and the
  // replicas drifted apart without a word.
  DTRAIN_CHECK(begun_, Errc::invalid_argument,
               "GradientSync::finish() without begin(): call begin() before each backward");
  begun_ = false;
  if (!sync_) return;
  // On an asynchronous device the backward may still be running: the wait below is to count
  // communication only (the host would wait for that compute anyway).
  if (dev_) dev_->synchronize();
  Stopwatch watch;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (!launched_[b]) launch(b);  // ranges a model never reported (none for GptModel)
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    in_flight_[b].wait();
    if (mode_ == GradReduction::shard) discard_others(b);
  }
  if (mode_ == GradReduction::shard && last_micro_) {
    const float inv = 1.0f / static_cast<float>(dp_.size());  // sum -> average
    for (const Range& r : owned_)
      dev_->scale(grads_ + r.first, inv, static_cast<std::int64_t>(r.second - r.first));
  }
  wait_seconds_ += watch.seconds();
}

void GradientSync::zero_grads() {
  DTRAIN_CHECK(dev_ != nullptr, Errc::invalid_argument, "GradientSync::zero_grads needs the device");
  for (const Range& r : owned_) dev_->zero(grads_ + r.first, sizeof(float) * (r.second - r.first));
  if (mode_ == GradReduction::all_reduce || mode_ == GradReduction::shard) return;
  for (const Bucket& b : buckets_) dev_->zero(grads_ + b.first, sizeof(float) * b.numel());
}

void GradientSync::all_gather(float* params, DType wire) {
  if (mode_ == GradReduction::all_reduce) return;
  DTRAIN_CHECK(wire == DType::f32 || dev_ != nullptr, Errc::invalid_argument,
               "GradientSync::all_gather in 16 bits needs the device");
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Range bucket{buckets_[b].first, buckets_[b].last};
    share_.all_gather_v(dp_, dev_, params, bucket, owned_[b], piece_counts_[b].data(), wire);
  }
}

void GradientSync::reserve_all_gather(DType wire) {
  if (mode_ == GradReduction::all_reduce || wire == DType::f32 || !dev_) return;
  std::size_t mine = 0, unit = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    mine = std::max(mine, owned_[b].second - owned_[b].first);
    unit = std::max(unit, buckets_[b].numel());
  }
  share_.reserve(*dev_, mine, unit);
}

void GradientSync::all_gather_words(std::uint16_t* words, DType fmt) {
  if (mode_ == GradReduction::all_reduce) return;
  check_16bit_format(fmt, "GradientSync::all_gather_words");
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    dp_.all_gather_v(words + owned_[b].first, words + buckets_[b].first,
                     piece_counts_[b].data(), fmt);
  }
}

}  // namespace dtrain::parallel
