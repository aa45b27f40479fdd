#pragma once
// ZeRO-3 parameter partitioning. Each rank keeps only its piece of every parameter unit
// (the same pieces GradientSync's shard mode owns, so the optimiser updates them in place);
// the rest of the parameter arena is discarded. acquire(unit, next) all-gathers the unit in
// place, and the gather of `next` starts without waiting, so it travels while this unit
// computes. release(unit) discards the other ranks' pieces again once no pass holds the unit.
#include <cstddef>
#include <memory>
#include <vector>

#include "dtrain/comm/communicator.hpp"
#include "dtrain/core/dtype.hpp"
#include "dtrain/device/device.hpp"
#include "dtrain/export.hpp"
#include "dtrain/parallel/gradient_sync.hpp"
#include "dtrain/parallel/param_residency.hpp"
#include "dtrain/parallel/piece_gather.hpp"

namespace dtrain::parallel {

class DTRAIN_API ParamGather final : public ParamResidency {
 public:
  // units: arena ranges (one per GradientSync bucket, in bucket order); counts[u]: the
  // elements of unit u each rank owns. Discards what this rank does not own right away.
  ParamGather(Communicator& dp, Device& dev, float* params, std::vector<Range> units,
              std::vector<std::vector<std::size_t>> counts);
  ~ParamGather() override;
  ParamGather(const ParamGather&) = delete;
  ParamGather& operator=(const ParamGather&) = delete;

  void acquire(int unit, int next) override;
  void release(int unit) override;
  void poll() override;
  void acquire_all() override;  // gathers in fp32
  void release_all() override;
  // Before the parameters change (the optimiser step): drops every gathered unit, so that
  // one prefetched by a pass that never acquired it cannot keep the other ranks' pieces from
  // before the update. A unit still held then is an internal error.
  void drop_unheld();

  // Elements held between passes (the owned pieces), and the most held at once so far.
  std::size_t owned_numel() const noexcept { return owned_numel_; }
  const std::vector<Range>& owned() const noexcept { return owned_; }  // one piece per unit
  std::size_t peak_numel() const noexcept { return peak_numel_; }  // outside acquire_all()
  // Time blocked waiting for gathers (not hidden behind compute) since construction.
  double wait_seconds() const noexcept { return wait_seconds_; }
  // What the gathers started from now on move: DType::f32 (the default), or bf16/f16 while
  // every owned piece holds exact values of that format (mixed precision, between updates):
  // 16-bit words, half the bytes, the same values once widened. Completes the gathers in
  // flight first (collective over dp when there are any, as every rank has the same ones).
  void set_wire(DType wire);

 private:
  void start(int unit);      // post the non-blocking gather
  void complete(int unit);   // wait for it (and widen 16-bit words into the arena)
  int take_words();          // a free WordGather of the pool
  void drop(int unit);       // discard the other ranks' pieces
  std::size_t size(int unit) const { return units_[unit].second - units_[unit].first; }

  Communicator& dp_;
  Device& dev_;
  float* params_;
  std::vector<Range> units_;
  std::vector<std::vector<std::size_t>> counts_;
  std::vector<Range> owned_;
  std::vector<int> holders_;     // acquires not yet released, per unit
  std::vector<bool> gathered_;   // full (or being gathered) per unit
  std::vector<Request> pending_;
  // 16-bit gathers: one WordGather per gather in flight (words_of_[unit]); the pool grows to
  // the most in flight at once (two during the passes: a unit and its prefetch)
  struct Words {
    WordGather gather;
    bool busy = false;
  };
  DType wire_ = DType::f32;
  std::vector<Words> words_;
  std::vector<int> words_of_;  // per unit: its Words while a 16-bit gather is in flight, or -1
  std::size_t owned_numel_ = 0;
  std::size_t held_numel_ = 0;   // owned pieces plus the gathered units' other pieces
  std::size_t peak_numel_ = 0;
  double wait_seconds_ = 0;
};

// A ParamGather whose units are sync's buckets and whose pieces are the gradient pieces sync
// owns (its shard mode with one bucket per unit), so the optimiser updates parameters and
// gradients in the same places.
DTRAIN_API std::unique_ptr<ParamGather> gather_by_bucket(Communicator& dp, Device& dev,
                                                         float* params, const GradientSync& sync);

}  // namespace dtrain::parallel
