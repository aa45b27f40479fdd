#pragma once
// Deterministic data parallelism: the step's gradient is the sum of the K micro-batch
// gradients g_0 ... g_{K-1} of the global batch, added strictly left to right in micro-batch
// order, whatever the number of data-parallel ranks. Each micro-batch gradient is computed
// alone, so g_k is the same bits on any layout; the sum then sees the same operands in the
// same order, so --dp 1, 2, 4 give bit-identical gradients and losses.
//
// How: the arena is cut into units, and each unit into one piece per rank (a ZeRO
// partition). After every local micro-batch m, each rank sends every other rank the pieces
// it owns of its gradient (point-to-point), and each rank folds the P gradients of its pieces
// in rank order onto its running sum: micro-batch k = m * P + p lands in order k. Same bytes
// moved as a reduce-scatter per micro-batch. Memory: one received piece set per peer plus
// the running sum ((P - 1)/P + 1/P = one gradient arena).
//
// What then: sum() gives everyone the whole sum (ZeRO 0), sum_owned() only the pieces this
// rank updates (ZeRO 1-3), and all_gather() returns updated pieces to everyone.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/buckets.hpp"
#include "dtrain/parallel/piece_gather.hpp"

namespace dtrain::parallel {

class DTRAIN_API FixedOrderSum {
 public:
  // units: arena ranges; counts[u]: the elements of unit u each rank owns (rank order).
  // Micro-batch k = m * dp.size() + dp.rank() is this rank's local micro-batch m (the
  // BatchPlan order).
  FixedOrderSum(Device& dev, Communicator& dp, std::vector<Range> units,
                std::vector<std::vector<std::size_t>> counts, int local_micro_batches);

  // Adds local micro-batch m's gradient (m = 0, 1, ... in order; m = 0 starts a new sum).
  // Collective over dp; grads may be overwritten once it returns.
  void add(int m, const float* grads);
  // After the last add: the sum in this rank's pieces of out, or in all of out.
  void sum_owned(float* out);
  void sum(float* out);
  // Every rank's pieces of arena to all ranks, in place; as 16-bit words when wire is
  // bf16/f16 (PieceGather).
  void all_gather(float* arena, DType wire = DType::f32);
  // The same for 16-bit parameter storage (PackedParameters): words[i] is arena element i,
  // fmt bf16 or f16.
  void all_gather_words(std::uint16_t* words, DType fmt);
  // The same fixed-order sum of the micro-batches' losses (local_losses[m] for local m).
  double sum_losses(const double* local_losses);

  const std::vector<Range>& owned() const { return owned_; }
  std::size_t owned_numel() const noexcept { return owned_numel_; }
  std::size_t bytes() const { return inbox_.bytes() + total_.bytes(); }
  // Time spent moving pieces (nothing overlaps compute in this mode) since construction.
  double wait_seconds() const noexcept { return wait_seconds_; }

 private:
  float* inbox(int peer);  // the pieces received from peer (never this rank)

  Device& dev_;
  Communicator& dp_;
  std::vector<Range> units_;
  std::vector<std::vector<std::size_t>> counts_;
  int local_;
  std::vector<Range> owned_;       // this rank's piece of each unit
  std::size_t owned_numel_ = 0;
  DeviceBuffer inbox_;             // (P - 1) x owned_numel_
  DeviceBuffer total_;             // owned_numel_: the running sum, pieces back to back
  std::vector<Request> requests_;
  PieceGather share_;
  std::vector<double> all_losses_;
  double wait_seconds_ = 0;
  int next_m_ = 0;  // the local micro-batch add() expects next (0 also starts a new sum)
};

}  // namespace dtrain::parallel
