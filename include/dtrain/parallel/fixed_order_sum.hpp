#pragma once
// Deterministic data parallelism: the step's gradient is the sum of the K micro-batch
// gradients g_0 ... g_{K-1} of the global batch, added strictly left to right in micro-batch
// order, whatever the number of data-parallel ranks. Each micro-batch gradient is computed
// alone (into its own slot), so g_k is the same bits on any layout; the sum then sees the
// same operands in the same order, so --dp 1, 2, 4 give bit-identical gradients and losses.
//
// How: rank c owns chunk c of the arena. Every rank sends chunk c of each of its slots to
// rank c (point-to-point), rank c folds the K pieces of its chunk in order k = 0..K-1, and
// an all-gather returns the sums to everyone. Same bytes moved as a reduce-scatter +
// all-gather; the cost is memory: one gradient-sized slot per local micro-batch plus K
// chunk-sized receive buffers (about 2 x local micro-batches x the gradient arena).
#include <cstddef>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"

namespace dtrain::parallel {

class DTRAIN_API FixedOrderSum {
 public:
  // Micro-batch k = m * dp.size() + dp.rank() is this rank's local micro-batch m
  // (the BatchPlan order).
  FixedOrderSum(Device& dev, Communicator& dp, std::size_t numel, int local_micro_batches);

  float* slot(int m) { return slots_.as<float>() + static_cast<std::size_t>(m) * numel_; }
  // out = sum over k of g_k, identical bits on every rank and every layout.
  void sum(float* out);
  // The same fixed-order sum of the micro-batches' losses (local_losses[m] for local m).
  double sum_losses(const double* local_losses);
  std::size_t bytes() const { return slots_.bytes() + inbox_.bytes(); }

 private:
  Device& dev_;
  Communicator& dp_;
  std::size_t numel_;
  int local_;
  std::vector<std::size_t> chunk_counts_, chunk_starts_;
  DeviceBuffer slots_;   // local_ x numel_
  DeviceBuffer inbox_;   // K x my chunk, index k
  std::vector<Request> requests_;
  std::vector<double> all_losses_;
};

}  // namespace dtrain::parallel
