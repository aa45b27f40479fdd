// GELU, tanh approximation (as GPT-2 uses).
#include <algorithm>
#include <cmath>

#include "device/cpu/fastmath.hpp"
#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

// The fp32 loops are element-wise over 4*C*B*T values per layer, so they get an AVX2+FMA
// clone (picked at load time by the CPU, with the baseline as fallback) next to the
// portable one.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DTRAIN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DTRAIN_CLONES
#endif

namespace dtrain::cpu {
namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kCubic = 0.044715;

template <class T> inline T gelu_value(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), c3 = static_cast<T>(kCubic);
  return T(0.5) * x * (T(1) + tanh_any<T>(k * (x + c3 * x * x * x)));
}

template <class T> inline T gelu_grad(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), c3 = static_cast<T>(kCubic);
  const T th = tanh_any<T>(k * (x + c3 * x * x * x));
  const T sech2 = T(1) - th * th;
  // Past |x| = 10, sech2 is 0 in any precision; x clamped there keeps x * x from overflowing
  // (0 * inf would be NaN from |x| ~ 5e19 on), and changes nothing below.
  const T xs = std::min(std::max(x, T(-10)), T(10));
  return T(0.5) * (T(1) + th) + T(0.5) * xs * sech2 * k * (T(1) + T(3) * c3 * xs * xs);
}

DTRAIN_CLONES void gelu_forward_f32(float* out, const float* inp, std::int64_t n) {
  DTRAIN_FOR_SIMD_IN_PLACE(n, i, out[i] = gelu_value(inp[i]));
}

DTRAIN_CLONES void gelu_backward_f32(float* dinp, const float* inp, const float* dout,
                                     std::int64_t n, bool accumulate) {
  if (accumulate) {
    DTRAIN_FOR_SIMD_IN_PLACE(n, i, dinp[i] += gelu_grad(inp[i]) * dout[i]);
  } else {
    DTRAIN_FOR_SIMD_IN_PLACE(n, i, dinp[i] = gelu_grad(inp[i]) * dout[i]);
  }
}
}  // namespace

template <class T> void gelu_forward(T* out, const T* inp, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = gelu_value(inp[i]);
}
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n, bool accumulate) {
  for (std::int64_t i = 0; i < n; ++i)
    dinp[i] = (accumulate ? dinp[i] : T(0)) + gelu_grad(inp[i]) * dout[i];
}
template <> void gelu_forward<float>(float* out, const float* inp, std::int64_t n) {
  gelu_forward_f32(out, inp, n);
}
template <>
void gelu_backward<float>(float* dinp, const float* inp, const float* dout, std::int64_t n,
                          bool accumulate) {
  gelu_backward_f32(dinp, inp, dout, n, accumulate);
}

template void gelu_forward<double>(double*, const double*, std::int64_t);
template void gelu_backward<double>(double*, const double*, const double*, std::int64_t, bool);

}  // namespace dtrain::cpu
