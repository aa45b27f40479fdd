#pragma once
// Branch-free float exp/tanh that GCC vectorises inside plain loops. glibc's tanhf is a
// scalar call of ~20 ns, which made GELU a third of a GPT step; these run at a few cycles
// per element with a relative error of a few ulp (exp) / absolute error < 1e-7 (tanh).
// Only the float kernels use them; the double instantiations stay on <cmath>.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace dtrain::cpu {

inline float bits_to_float(std::int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

// exp(x), x clamped to [-87, 88] (results stay normal floats), and 0 where exp(x) is below
// the smallest normal float (x < -87.34: -inf gives 0, as a masked logit must).
inline float fast_exp(float x) {
  const bool underflows = x < -87.3365447f;
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln 2) with the 1.5*2^23 trick (no rounding call, so the loop vectorises)
  const float shifter = 12582912.0f;
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  // r = x - n ln2, with ln2 split in two so the product is exact enough
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  // exp(r) on |r| <= ln2/2: Taylor to degree 7 (truncation < 1.2e-8 relative)
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // times 2^n, built in the exponent field. A NaN x has a NaN n, which no integer holds:
  // any exponent will do there, since p is NaN too.
  const std::int32_t biased = static_cast<std::int32_t>(n == n ? n : 0.0f) + 127;
  const float e = p * bits_to_float(static_cast<std::int32_t>(static_cast<std::uint32_t>(biased) << 23));
  return underflows ? 0.0f : e;
}

// tanh(u) = sign(u) (1 - e^{-2|u|}) / (1 + e^{-2|u|})
inline float fast_tanh(float u) {
  const float a = u < 0 ? -u : u;
  const float t = fast_exp(-2.0f * a);
  const float th = (1.0f - t) / (1.0f + t);
  return u < 0 ? -th : th;
}

template <class T> inline T tanh_any(T x) { return std::tanh(x); }
template <> inline float tanh_any<float>(float x) { return fast_tanh(x); }
template <class T> inline T exp_any(T x) { return std::exp(x); }
template <> inline float exp_any<float>(float x) { return fast_exp(x); }

}  // namespace dtrain::cpu
