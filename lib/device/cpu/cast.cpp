// fp32 <-> bf16/f16 conversions, rounding to a 16-bit format in fp32, and the non-finite
// check of loss scaling. Branch-free bit arithmetic (device/half_bits.hpp) in simd loops.
#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"
#include "device/half_bits.hpp"

namespace dtrain::cpu {

void convert_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n) {
  parallel_for_simd(n, [=](std::int64_t i) { dst[i] = halfbits::to_bf16(src[i]); });
}

void convert_to_f16(std::uint16_t* dst, const float* src, std::int64_t n) {
  parallel_for_simd(n, [=](std::int64_t i) { dst[i] = halfbits::to_f16(src[i]); });
}

void convert_from_bf16(float* dst, const std::uint16_t* src, std::int64_t n) {
  parallel_for_simd(n, [=](std::int64_t i) { dst[i] = halfbits::from_bf16(src[i]); });
}

void convert_from_f16(float* dst, const std::uint16_t* src, std::int64_t n) {
  parallel_for_simd(n, [=](std::int64_t i) { dst[i] = halfbits::from_f16(src[i]); });
}

void round_to_bf16(float* dst, const float* src, std::int64_t n) {
  parallel_for_simd(n, [=](std::int64_t i) { dst[i] = halfbits::round_bf16(src[i]); });
}

void round_to_f16(float* dst, const float* src, std::int64_t n) {
  parallel_for_simd(n, [=](std::int64_t i) { dst[i] = halfbits::round_f16(src[i]); });
}

bool any_nonfinite(const float* x, std::int64_t n) {
  // An OR over blocks, so the loop vectorises and a long buffer still stops early.
  constexpr std::int64_t kBlock = 4096;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t e = b + kBlock < n ? b + kBlock : n;
    int found = 0;
#if defined(_OPENMP)
#pragma omp simd reduction(| : found)
#endif
    for (std::int64_t i = b; i < e; ++i) found |= halfbits::is_nonfinite(x[i]) ? 1 : 0;
    if (found) return true;
  }
  return false;
}

}  // namespace dtrain::cpu
