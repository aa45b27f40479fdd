#pragma once
// Data-parallel gradient reduction in buckets, overlapped with backward.
//
// The model reports gradient ranges as backward finishes them (GptModel's grad-ready hook);
// as soon as every range of a bucket is in, the bucket's non-blocking reduction starts, and
// every later report also polls the reductions in flight so MPI progresses them while
// backward runs. Accumulation micro-steps (begin(false)) communicate nothing.
//
// Modes: all_reduce averages each bucket everywhere (ZeRO 0). reduce_scatter (ZeRO 1)
// leaves each rank the average of its own piece of every bucket, in place in the arena;
// the rest of the arena is stale until all_gather() brings the updated parameters back.
#include <cstddef>
#include <unordered_map>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/buckets.hpp"

namespace dtrain::parallel {

enum class GradReduction { all_reduce, reduce_scatter };

class DTRAIN_API GradientSync {
 public:
  GradientSync(Communicator& dp, float* grads, const std::vector<Range>& ready_ranges,
               std::size_t bucket_bytes, GradReduction mode);

  void begin(bool sync);                          // start of a backward
  void ready(std::size_t first, std::size_t last);  // the hook: [first, last) is final
  void finish();  // launch what was never reported, wait for everything

  // Each rank's piece of each bucket (reduce_scatter); the whole arena for all_reduce.
  const std::vector<Range>& owned() const { return owned_; }
  // Every rank's pieces of params to all ranks, bucket by bucket, in place (reduce_scatter).
  void all_gather(float* params);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  double last_wait_seconds() const { return wait_seconds_; }  // blocked in finish()

 private:
  void launch(std::size_t bucket);
  void poll();

  Communicator& dp_;
  float* grads_;
  GradReduction mode_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_range_;
  std::unordered_map<std::size_t, int> range_by_first_;
  std::vector<std::vector<std::size_t>> piece_counts_;  // per bucket, per rank
  std::vector<Range> owned_;
  std::vector<int> pending_ranges_;  // per bucket: ranges not yet reported this backward
  std::vector<bool> launched_;
  std::vector<Request> in_flight_;   // one slot per bucket, reused every step
  bool sync_ = false;
  double wait_seconds_ = 0;
};

}  // namespace dtrain::parallel
