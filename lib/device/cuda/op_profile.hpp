#pragma once
// OpProfile: with DTRAIN_CUDA_PROFILE=1, the GPU time each Device op takes, from events
// recorded on the device's stream around it. Only the outermost op is timed (linear_forward
// counts its GEMMs as its own). Finished spans are added up at synchronize(), which the
// Trainer calls once per step, and the table (op, calls, total, share, mean, and from the
// ops' OpWork their flops and bytes and the rates they reached) goes to stderr when the
// process exits, with the GPU's busy share of the wall time since the first op.
// Off, the default, an op pays one branch.
#include <cuda_runtime.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda/op_work.hpp"

namespace dtrain::cuda {

class OpProfile {
 public:
  OpProfile(std::string device_name, cudaStream_t stream);
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  bool enabled() const noexcept { return enabled_; }

  // Times one op from construction to destruction (nothing when off or nested in an op).
  class Span {
   public:
    Span(OpProfile& profile, const char* op, OpWork work);
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    OpProfile* profile_ = nullptr;  // null: not timed
    std::size_t entry_ = 0;         // its number among all spans timed
    bool counted_ = false;          // in the nesting depth
  };

  // Adds up the spans whose work has finished (all of them after a stream synchronisation);
  // never waits. Spans also collect themselves when many are pending (a program that never
  // synchronises). A span whose events failed is left out.
  void collect();
  // The table of what collect() added up, the most time first; empty when nothing was timed.
  std::string report() const;

 private:
  enum class End { open, recorded, failed };
  struct Pending {
    const char* op;
    OpWork work;
    cudaEvent_t start, end;
    End state;
  };
  struct Total {
    const char* op;  // a string literal: compared by address first, then by text
    long calls = 0;
    double ms = 0;
    OpWork work;
  };
  cudaEvent_t take_event();
  void collect_locked();
  void add(const char* op, float ms, OpWork work);

  bool enabled_ = false;
  std::string device_name_;
  cudaStream_t stream_;
  mutable std::mutex mutex_;
  std::vector<Pending> pending_;  // in stream order; the first is span number collected_
  std::size_t collected_ = 0;
  std::vector<cudaEvent_t> free_events_;
  std::vector<Total> totals_;
  std::chrono::steady_clock::time_point first_, last_collect_;
};

}  // namespace dtrain::cuda
