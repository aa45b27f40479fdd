// LayerNorm over the last dimension, saving mean and 1/std per row for backward.
#include <cmath>

#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

namespace dtrain::cpu {

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
  parallel_for(0, N, static_cast<std::int64_t>(N) * C, [=](int n) {
    const T* x = inp + static_cast<std::int64_t>(n) * C;
    T* o = out + static_cast<std::int64_t>(n) * C;
    // Two passes (mean, then centred variance): no cancellation for rows with a large mean.
    // Summed in double: in fp32 the squares overflow from |x| ~ 7e17 (rstd 0, the row's
    // output silently 0) and the sum from ~4e35 (NaN), values a diverging run reaches.
    double sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const double md = sum / C;
    double var = 0;
    for (int c = 0; c < C; ++c) {
      const double d = x[c] - md;
      var += d * d;
    }
    var /= C;
    const T m = static_cast<T>(md);
    const T s = static_cast<T>(1.0 / std::sqrt(var + kLayerNormEps));
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  });
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int N, int C) {
  // Serial over rows: dweight/dbias are shared sums, and this is O(N*C) next to O(N*C^2) GEMMs.
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<std::int64_t>(n) * C;
    const T* d = dout + static_cast<std::int64_t>(n) * C;
    T* dx = dinp + static_cast<std::int64_t>(n) * C;
    const T m = mean[n], s = rstd[n];
    // dnorm = dout * weight; dx = s * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat))
    double sum_dn = 0, sum_dn_xhat = 0;  // in double, as the forward's sums
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - m) * s;
      const T dn = d[c] * weight[c];
      sum_dn += dn;
      sum_dn_xhat += static_cast<double>(dn) * xhat;
      dbias[c] += d[c];
      dweight[c] += d[c] * xhat;
    }
    const T a = static_cast<T>(sum_dn / C), b = static_cast<T>(sum_dn_xhat / C);
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - m) * s;
      dx[c] += s * (d[c] * weight[c] - a - xhat * b);
    }
  }
}

#define DTRAIN_INSTANTIATE(T)                                                                  \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);      \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,      \
                                      const T*, int, int);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
