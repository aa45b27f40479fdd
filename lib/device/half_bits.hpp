#pragma once
// Branch-free fp32 <-> bf16/f16 rounding on bit patterns, shared by the CPU loops and the
// CUDA kernels so both devices give the same bits. Every function is a chain of selects, so
// the CPU loops vectorise. Rounding is to nearest, ties to even (docs/mixed-precision.md).
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DTRAIN_HD __host__ __device__ __forceinline__
#else
#define DTRAIN_HD inline
#endif

namespace dtrain::halfbits {

DTRAIN_HD std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
DTRAIN_HD float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

constexpr std::uint32_t kAbs = 0x7FFFFFFFu;
constexpr std::uint32_t kInf = 0x7F800000u;
constexpr std::uint32_t kQuiet = 0x00400000u;

// bf16: keep the top 16 bits, rounded to nearest even; NaN made quiet (so it never rounds
// to inf).
DTRAIN_HD std::uint32_t bf16_round_bits(std::uint32_t x) {
  const std::uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) & 0xFFFF0000u;
  return (x & kAbs) > kInf ? (x | kQuiet) & 0xFFFF0000u : rounded;
}

// f16 rounding of |x| (bits a), result as fp32 bits without the sign:
// normal range: round the mantissa to 10 bits (a carry into the exponent is right);
// below 2^-14: the f16 quantum is 2^-24, the fp32 quantum of [0.5, 1), so adding and
// subtracting 0.5 rounds to it with the hardware's ties-to-even;
// 65520 and above (the midpoint past 65504): inf; NaN: quiet NaN.
DTRAIN_HD std::uint32_t f16_round_abs_bits(std::uint32_t a) {
  const std::uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1u)) & ~0x1FFFu;
  const std::uint32_t sub = bits_of((float_of(a) + 0.5f) - 0.5f);
  std::uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x477FF000u ? kInf : r;
  return a > kInf ? a | kQuiet : r;
}

DTRAIN_HD float round_bf16(float f) { return float_of(bf16_round_bits(bits_of(f))); }

DTRAIN_HD float round_f16(float f) {
  const std::uint32_t x = bits_of(f);
  return float_of((x & ~kAbs) | f16_round_abs_bits(x & kAbs));
}

DTRAIN_HD std::uint16_t to_bf16(float f) {
  return static_cast<std::uint16_t>(bf16_round_bits(bits_of(f)) >> 16);
}

// The f16 encoding of f: round first, then re-encode exactly. A subnormal result is an
// integer number of 2^-24 (1024 of them is the smallest normal, whose encoding 0x0400 is
// that same integer).
DTRAIN_HD std::uint16_t to_f16(float f) {
  const std::uint32_t x = bits_of(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t r = f16_round_abs_bits(x & kAbs);
  const std::uint32_t normal = (r - 0x38000000u) >> 13;  // exponent 127 -> 15 bias
  const std::uint32_t sub = static_cast<std::uint32_t>(float_of(r) * 16777216.0f);  // / 2^-24
  std::uint32_t h = r < 0x38800000u ? sub : normal;
  h = r == kInf ? 0x7C00u : h;
  h = r > kInf ? 0x7E00u | ((r >> 13) & 0x3FFu) : h;
  return static_cast<std::uint16_t>(sign | h);
}

DTRAIN_HD float from_bf16(std::uint16_t h) { return float_of(static_cast<std::uint32_t>(h) << 16); }

DTRAIN_HD float from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  const std::uint32_t sub = bits_of(static_cast<float>(m) * 5.9604644775390625e-08f);  // m 2^-24
  std::uint32_t r = e == 0 ? sub : ((e + 112u) << 23) | (m << 13);
  r = e == 31 ? kInf | (m << 13) : r;
  return float_of(sign | r);
}

DTRAIN_HD bool is_nonfinite(float f) { return (bits_of(f) & kInf) == kInf; }

}  // namespace dtrain::halfbits
