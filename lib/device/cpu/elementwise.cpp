// Elementwise helpers over flat buffers (residual stream, gradient accumulation, norms).
#include <algorithm>

#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

namespace dtrain::cpu {

template <class T> void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
  parallel_for(0, n, n, [=](std::int64_t i) { out[i] = a[i] + b[i]; });
}

template <class T> void accumulate(T* dst, const T* src, std::int64_t n) {
  parallel_for(0, n, n, [=](std::int64_t i) { dst[i] += src[i]; });
}

template <class T> void scale(T* x, T s, std::int64_t n) {
  parallel_for(0, n, n, [=](std::int64_t i) { x[i] *= s; });
}

template <class T> void fill(T* x, T value, std::int64_t n) { std::fill(x, x + n, value); }

template <class T> void copy(T* dst, const T* src, std::int64_t n) { std::copy(src, src + n, dst); }

template <class T> double sum_squares(const T* x, std::int64_t n) {
  // Accumulated in double (it feeds the global gradient norm over millions of elements);
  // four independent partial sums keep the adds pipelined.
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double a = x[i], b = x[i + 1], c = x[i + 2], d = x[i + 3];
    s0 += a * a;
    s1 += b * b;
    s2 += c * c;
    s3 += d * d;
  }
  for (; i < n; ++i) s0 += static_cast<double>(x[i]) * x[i];
  return (s0 + s1) + (s2 + s3);
}

#define DTRAIN_INSTANTIATE(T)                                                   \
  template void residual_forward<T>(T*, const T*, const T*, std::int64_t);      \
  template void accumulate<T>(T*, const T*, std::int64_t);                      \
  template void scale<T>(T*, T, std::int64_t);                                  \
  template void fill<T>(T*, T, std::int64_t);                                   \
  template void copy<T>(T*, const T*, std::int64_t);                            \
  template double sum_squares<T>(const T*, std::int64_t);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
