#pragma once
// Wall-clock timing on the monotonic clock.
#include <chrono>

namespace dtrain {

inline double now_seconds() noexcept {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  Stopwatch() noexcept : start_(now_seconds()) {}
  void reset() noexcept { start_ = now_seconds(); }
  double seconds() const noexcept { return now_seconds() - start_; }
  double millis() const noexcept { return seconds() * 1e3; }

 private:
  double start_;
};

// Adds the time spent in a scope to a running total (e.g. per-stage busy time).
class ScopedAccumulate {
 public:
  explicit ScopedAccumulate(double& total_seconds) noexcept : total_(total_seconds) {}
  ~ScopedAccumulate() { total_ += watch_.seconds(); }
  ScopedAccumulate(const ScopedAccumulate&) = delete;
  ScopedAccumulate& operator=(const ScopedAccumulate&) = delete;

 private:
  double& total_;
  Stopwatch watch_;
};

}  // namespace dtrain
