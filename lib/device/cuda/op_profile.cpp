#include "device/cuda/op_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "device/cuda/cuda_check.hpp"
#include "dtrain/core/env.hpp"

namespace dtrain::cuda {
namespace {

// The profiles alive, printed at exit: the devices live until then, and by then the CUDA
// runtime may be gone, so printing uses only what collect() already added up.
std::mutex g_registry_mutex;
std::vector<const OpProfile*> g_profiles;

void print_profiles() {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  for (const OpProfile* p : g_profiles) std::fputs(p->report().c_str(), stderr);
}

thread_local int t_depth = 0;  // ops inside ops on this thread: only the outermost is timed
constexpr std::size_t kCollectAt = 4096;  // pending spans before a span collects finished ones

}  // namespace

OpProfile::OpProfile(std::string device_name, cudaStream_t stream)
    : device_name_(std::move(device_name)), stream_(stream) {
  enabled_ = env::get_bool(env::cuda::kProfile, false);
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  if (g_profiles.empty()) std::atexit(print_profiles);
  g_profiles.push_back(this);
}

OpProfile::~OpProfile() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    g_profiles.erase(std::remove(g_profiles.begin(), g_profiles.end(), this), g_profiles.end());
  }
  for (const Pending& p : pending_) {
    (void)cudaEventDestroy(p.start);
    (void)cudaEventDestroy(p.end);
  }
  for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
}

cudaEvent_t OpProfile::take_event() {
  if (free_events_.empty()) {
    cudaEvent_t e = nullptr;
    DTRAIN_CUDA(cudaEventCreate(&e));
    return e;
  }
  cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

OpProfile::Span::Span(OpProfile& profile, const char* op, OpWork work) {
  if (!profile.enabled_) return;
  if (t_depth > 0) {
    ++t_depth;
    counted_ = true;
    return;
  }
  std::lock_guard<std::mutex> lock(profile.mutex_);
  if (profile.collected_ == 0 && profile.pending_.empty())
    profile.first_ = std::chrono::steady_clock::now();
  if (profile.pending_.size() >= kCollectAt) profile.collect_locked();
  const Pending p{op, work, profile.take_event(), profile.take_event(), End::open};
  DTRAIN_CUDA(cudaEventRecord(p.start, profile.stream_));
  profile.pending_.push_back(p);
  entry_ = profile.collected_ + profile.pending_.size() - 1;
  profile_ = &profile;
  ++t_depth;
  counted_ = true;
}

OpProfile::Span::~Span() {
  if (counted_) --t_depth;
  if (!profile_) return;
  std::lock_guard<std::mutex> lock(profile_->mutex_);
  Pending& p = profile_->pending_[entry_ - profile_->collected_];
  p.state = cudaEventRecord(p.end, profile_->stream_) == cudaSuccess ? End::recorded : End::failed;
}

void OpProfile::collect() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  collect_locked();
}

void OpProfile::collect_locked() {
  std::size_t done = 0;
  for (; done < pending_.size(); ++done) {
    const Pending& p = pending_[done];
    // In stream order: the rest are later (or still open, inside an op on another thread).
    if (p.state == End::open) break;
    if (p.state == End::recorded) {
      if (cudaEventQuery(p.end) == cudaErrorNotReady) {
        (void)cudaGetLastError();  // "not ready" is not an error: not for a later launch check
        break;
      }
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess)
        add(p.op, ms, p.work);
      else
        (void)cudaGetLastError();  // left out, and not blamed on a later launch
    }
    free_events_.push_back(p.start);
    free_events_.push_back(p.end);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  collected_ += done;
  if (done > 0) last_collect_ = std::chrono::steady_clock::now();
}

void OpProfile::add(const char* op, float ms, OpWork work) {
  auto it = std::find_if(totals_.begin(), totals_.end(), [op](const Total& t) {
    return t.op == op || std::strcmp(t.op, op) == 0;
  });
  if (it == totals_.end()) it = totals_.insert(totals_.end(), Total{op});
  ++it->calls;
  it->ms += ms;
  it->work.flops += work.flops;
  it->work.bytes += work.bytes;
}

std::string OpProfile::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (totals_.empty()) return {};
  std::vector<Total> rows = totals_;
  std::sort(rows.begin(), rows.end(), [](const Total& a, const Total& b) { return a.ms > b.ms; });
  double busy_ms = 0;
  long calls = 0;
  for (const Total& t : rows) {
    busy_ms += t.ms;
    calls += t.calls;
  }
  const double wall_ms = std::chrono::duration<double, std::milli>(last_collect_ - first_).count();
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line,
                "[dtrain] GPU time by op on %s (DTRAIN_CUDA_PROFILE): %.3f ms in %ld ops, "
                "%.1f%% of the %.3f ms since the first\n",
                device_name_.c_str(), busy_ms, calls,
                wall_ms > 0 ? 100.0 * busy_ms / wall_ms : 0.0, wall_ms);
  out += line;
  std::snprintf(line, sizeof line, "  %-28s %9s %12s %7s %10s %11s %8s %11s %8s\n", "op",
                "calls", "total ms", "share", "mean us", "GFLOP", "TFLOP/s", "GB", "GB/s");
  out += line;
  char cell[64];
  for (const Total& t : rows) {
    std::snprintf(line, sizeof line, "  %-28s %9ld %12.3f %6.1f%% %10.1f", t.op, t.calls, t.ms,
                  busy_ms > 0 ? 100.0 * t.ms / busy_ms : 0.0, 1e3 * t.ms / t.calls);
    out += line;
    // Work in giga, rate per second in units of `unit` (TFLOP/s, GB/s); "-" where none.
    const std::pair<double, double> columns[] = {{t.work.flops, 1e12}, {t.work.bytes, 1e9}};
    for (const auto& [amount, unit] : columns) {
      if (amount <= 0)
        std::snprintf(cell, sizeof cell, " %11s %8s", "-", "-");
      else if (t.ms <= 0)
        std::snprintf(cell, sizeof cell, " %11.6g %8s", amount / 1e9, "-");
      else
        std::snprintf(cell, sizeof cell, " %11.6g %8.1f", amount / 1e9,
                      amount / (t.ms * 1e-3) / unit);
      out += cell;
    }
    out += '\n';
  }
  return out;
}

}  // namespace dtrain::cuda
