// Softmax cross-entropy fused over the vocabulary. Only the first V of the Vp columns are the
// real vocabulary; padding columns (alignment, vocab-parallel splits) are never read in the
// forward and get zero gradient, so whatever they hold cannot change the loss.
#include <algorithm>
#include <cmath>

#include "device/cpu/fastmath.hpp"
#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

namespace dtrain::cpu {

template <class T>
void crossentropy_forward(T* losses, T* lse, const T* logits, const std::int32_t* targets, int N,
                          int V, int Vp) {
  parallel_for(0, N, static_cast<std::int64_t>(N) * V, [=](int n) {
    const T* z = logits + static_cast<std::int64_t>(n) * Vp;
    T mx = z[0];
    DTRAIN_OMP_SIMD_MAX(mx)
    for (int j = 1; j < V; ++j) mx = z[j] > mx ? z[j] : mx;  // subtract the max: exp never overflows
    T sum = 0;
    DTRAIN_OMP_SIMD_SUM(sum)
    for (int j = 0; j < V; ++j) sum += exp_any<T>(z[j] - mx);
    // (mx - target) first: at large logits mx + log(sum) would lose log(sum) to rounding.
    lse[n] = mx + std::log(sum);
    losses[n] = (mx - z[targets[n]]) + std::log(sum);
  });
}

template <class T>
void crossentropy_backward(T* dlogits, const T* logits, const T* lse, const std::int32_t* targets,
                           const T* dlosses, int N, int V, int Vp) {
  parallel_for(0, N, static_cast<std::int64_t>(N) * V, [=](int n) {
    const T* z = logits + static_cast<std::int64_t>(n) * Vp;
    T* dz = dlogits + static_cast<std::int64_t>(n) * Vp;
    const T l = lse[n], d = dlosses[n];
    for (int j = 0; j < V; ++j) dz[j] = exp_any<T>(z[j] - l) * d;  // element-wise: safe in place
    dz[targets[n]] -= d;
    for (int j = V; j < Vp; ++j) dz[j] = 0;
  });
}

#define DTRAIN_INSTANTIATE(T)                                                                  \
  template void crossentropy_forward<T>(T*, T*, const T*, const std::int32_t*, int, int, int); \
  template void crossentropy_backward<T>(T*, const T*, const T*, const std::int32_t*,          \
                                         const T*, int, int, int);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
