#pragma once
// Helpers of the GPU tests: random inputs, device copies of host vectors, and the error
// measure every comparison with the CPU kernels uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dtrain/device/device.hpp"

namespace gputest {

// fp32 kernels against the CPU's: |gpu - cpu| <= 1e-5 * max|cpu| (see relative_error).
constexpr double kFp32Bound = 1e-5;

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<std::int32_t> random_ints(std::size_t n, std::uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Sets the device's GEMM operand format, and leaves the process's device with fp32 operands
// again, however the test ends.
struct OperandFormat {
  OperandFormat(dtrain::Device& dev, dtrain::DType fmt) : dev_(dev) {
    dev.set_gemm_operand_format(fmt);
  }
  ~OperandFormat() { dev_.set_gemm_operand_format(dtrain::DType::f32); }
  OperandFormat(const OperandFormat&) = delete;
  OperandFormat& operator=(const OperandFormat&) = delete;
  dtrain::Device& dev_;
};

// Device memory holding a copy of a host vector (or n zeros); host() reads it back.
template <class T> class OnDevice {
 public:
  OnDevice(dtrain::Device& dev, const std::vector<T>& host)
      : dev_(&dev), n_(host.size()), buf_(dev, bytes(host.size())) {
    dev.copy(buf_.data(), host.data(), bytes(n_), dtrain::CopyKind::host_to_device);
  }
  OnDevice(dtrain::Device& dev, std::size_t n) : dev_(&dev), n_(n), buf_(dev, bytes(n)) {}
  T* get() { return buf_.as<T>(); }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    dev_->copy(out.data(), buf_.data(), bytes(n_), dtrain::CopyKind::device_to_host);
    return out;
  }

 private:
  static std::size_t bytes(std::size_t n) { return std::max<std::size_t>(1, n) * sizeof(T); }
  dtrain::Device* dev_;
  std::size_t n_;
  dtrain::DeviceBuffer buf_;
};

// The larger of two errors, NaN if either is (std::max keeps its first argument against a
// NaN, which would let a NaN result pass an "error < bound" check).
inline double worse(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// max |got - want| / max |want|: the error relative to the largest reference value, so that
// entries which are (near) zero, or cancel, do not make a relative bound meaningless.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (std::isnan(d)) return d;  // std::max would keep the old value: a NaN must fail
    diff = std::max(diff, d);
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                         double bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i]) && !std::isnan(want[i])) << what << ": NaN at " << i;
  }
  const double e = relative_error(got, want);
  std::printf("  %-40s relative error %.3g (bound %.1g)\n", what.c_str(), e, bound);
  EXPECT_LE(e, bound) << what;
}

// 16-bit words a GEMM wrote (bf16 or fp16, rounded by cuBLAS) against its fp32 result rounded
// by dtrain: cuBLAS may take another algorithm, so another summation order, for a 16-bit
// output. That moves a word by one unit in the last place where the value lies near a
// rounding boundary, and by more only where the sum cancels to near zero, within the fp32
// sums' own error (1e-5 of the largest value here). Bit for bit where both ran the same
// algorithm, as on the emulator; prints how many words moved.
inline void expect_gemm_words_match_rounding(const std::vector<std::uint16_t>& got,
                                             const std::vector<std::uint16_t>& want,
                                             dtrain::DType fmt, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::vector<float> g(got.size()), w(want.size());
  dtrain::Device& host = dtrain::cpu_device();  // widens host words exactly
  host.convert_from_16bit(g.data(), got.data(), static_cast<std::int64_t>(g.size()), fmt);
  host.convert_from_16bit(w.data(), want.data(), static_cast<std::int64_t>(w.size()), fmt);
  double largest = 0;
  for (const float v : w) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  auto ordered = [](std::uint16_t word) {  // sign and magnitude to a line: neighbours 1 apart
    const int magnitude = word & 0x7FFF;
    return (word & 0x8000) ? -magnitude : magnitude;
  };
  std::size_t moved = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++moved;
    const bool neighbour = std::abs(ordered(got[i]) - ordered(want[i])) == 1;
    ASSERT_TRUE(neighbour || std::fabs(static_cast<double>(g[i]) - w[i]) <= 1e-5 * largest)
        << what << ": word " << i << " is " << g[i] << ", rounding gives " << w[i];
  }
  if (moved > 0) std::printf("  %s: %zu of %zu words moved\n", what.c_str(), moved, got.size());
}

}  // namespace gputest
