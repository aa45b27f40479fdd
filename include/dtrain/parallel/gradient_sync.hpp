#pragma once
// Data-parallel gradient reduction in buckets, overlapped with backward.
//
// The model reports gradient ranges as backward finishes them (GptModel's grad-ready hook);
// as soon as every range of a bucket is in, the bucket's non-blocking reduction starts, and
// every later report also polls the reductions in flight so MPI progresses them while
// backward runs.
//
// Modes:
//  * all_reduce (ZeRO 0) averages each bucket everywhere. Accumulation micro-steps
//    (begin(false)) communicate nothing.
//  * reduce_scatter (ZeRO 1) leaves each rank the average of its own piece of every bucket,
//    in place in the arena; the rest of the arena is stale until all_gather() brings the
//    updated parameters back. Accumulation micro-steps communicate nothing.
//  * shard (ZeRO 2 and 3) keeps only this rank's piece of the gradients: every micro-step
//    reduce-scatters (sum) each bucket into the owned piece, where the micro-steps add up,
//    and discards the rest of the bucket (Device::discard) as soon as its reduction is done;
//    the model announces each range before backward writes it (writing()), which restores
//    the bucket's other pieces, so the full gradient exists only for the buckets backward
//    is working on. The last micro-step divides the pieces by the group size. Pieces are
//    cut at page boundaries (split_aligned) so that discarding returns whole pages.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/buckets.hpp"
#include "dtrain/parallel/piece_gather.hpp"

namespace dtrain::parallel {

enum class GradReduction { all_reduce, reduce_scatter, shard };

class DTRAIN_API GradientSync {
 public:
  // dev: needed by the shard mode (discard, zero, scale); may be null otherwise.
  GradientSync(Communicator& dp, float* grads, const std::vector<Range>& ready_ranges,
               std::size_t bucket_bytes, GradReduction mode, Device* dev = nullptr);

  // Start of a backward: sync = reduce this micro-step (always true in shard mode with more
  // than one rank); last_micro = the step's last micro-step.
  void begin(bool sync, bool last_micro = true);
  void ready(std::size_t first, std::size_t last);  // the hook: [first, last) is final
  // The hook before backward first writes [first, last) (a planned range): in shard mode the
  // bucket's discarded pieces are restored (zeros). A device that maps memory back only on
  // restore (a GPU) needs every write announced this way; a bucket whose ranges arrive
  // unannounced is restored at its reduction, which on such a device is too late (the CPU,
  // whose pages come back when written, would not mind).
  void writing(std::size_t first, std::size_t last);
  // writing() of every range at once, for a backward that announces nothing (the C API's
  // MLP): the whole arena is writable until the reductions discard the pieces again.
  void writing_everything();
  // Launch what was never reported, wait for everything. Each finish() needs a begin()
  // since the last finish() (Errc::invalid_argument).
  void finish();
  void poll();    // lets the reductions in flight progress; never blocks

  // Zeroes the gradients this rank holds: the whole arena, or in shard mode its pieces.
  void zero_grads();

  GradReduction mode() const noexcept { return mode_; }
  // Each rank's piece of each bucket (reduce_scatter, shard); the whole arena for all_reduce.
  const std::vector<Range>& owned() const { return owned_; }
  // Elements of bucket b held by each rank (in rank order).
  const std::vector<std::size_t>& piece_counts(std::size_t b) const { return piece_counts_[b]; }
  std::size_t owned_numel() const noexcept;  // sum of owned()
  // Every rank's pieces of params to all ranks, bucket by bucket, in place (reduce_scatter,
  // shard); as 16-bit words when wire is bf16/f16 (PieceGather; needs the device).
  void all_gather(float* params, DType wire = DType::f32);
  // Allocates now what all_gather(params, wire) would at its first call (16-bit words'
  // buffers), so that a caller can agree on running out of memory. Not collective.
  void reserve_all_gather(DType wire);
  // The same for 16-bit parameter storage (PackedParameters): words[i] is arena element i,
  // fmt bf16 or f16.
  void all_gather_words(std::uint16_t* words, DType fmt);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Time blocked in finish() since construction: the reduction not hidden behind backward.
  double wait_seconds() const { return wait_seconds_; }

 private:
  void launch(std::size_t bucket);
  void discard_others(std::size_t bucket);  // shard mode: drop what other ranks own
  void restore_others(std::size_t bucket);  // shard mode: map it back before writing

  Communicator& dp_;
  float* grads_;
  GradReduction mode_;
  Device* dev_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_range_;
  std::unordered_map<std::size_t, int> range_by_first_;
  std::vector<std::vector<std::size_t>> piece_counts_;  // per bucket, per rank
  std::vector<Range> owned_;
  std::vector<int> pending_ranges_;  // per bucket: ranges not yet reported this backward
  std::vector<bool> launched_;
  std::vector<bool> discarded_;      // shard mode: the bucket's other pieces are discarded
  std::vector<Request> in_flight_;   // one slot per bucket, reused every step
  PieceGather share_;
  bool begun_ = false;  // begin() since the last finish()
  bool sync_ = false;
  bool last_micro_ = true;
  double wait_seconds_ = 0;
};

}  // namespace dtrain::parallel
