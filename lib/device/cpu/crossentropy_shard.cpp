// Vocabulary-parallel softmax cross-entropy, one vocabulary shard at a time. A shard holds the
// logits of tokens [vocab_start, vocab_start + V) in the first V of its ld columns; the rest
// is padding that is never read and gets zero gradient. The caller reduces the per-row
// statistics over shards between the passes (max, then sum-exp and target logit), so the
// full row of logits never exists in one place.
#include <cmath>
#include <limits>

#include "device/cpu/fastmath.hpp"
#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

namespace dtrain::cpu {

namespace {
inline bool owns(std::int32_t target, int vocab_start, int V) {
  const std::int64_t j = static_cast<std::int64_t>(target) - vocab_start;
  return j >= 0 && j < V;
}
}  // namespace

template <class T>
void crossentropy_shard_stats(T* max, T* target_logit, const T* logits,
                              const std::int32_t* targets, int N, int V, int ld,
                              int vocab_start) {
  parallel_for(0, N, static_cast<std::int64_t>(N) * V, [=](int n) {
    const T* z = logits + static_cast<std::int64_t>(n) * ld;
    T mx = -std::numeric_limits<T>::infinity();  // an empty shard must not win the max
    DTRAIN_OMP_SIMD_MAX(mx)
    for (int j = 0; j < V; ++j) mx = z[j] > mx ? z[j] : mx;
    max[n] = mx;
    // 0 on the shards that do not own the target, so a sum over shards picks the owner's
    target_logit[n] = owns(targets[n], vocab_start, V) ? z[targets[n] - vocab_start] : T(0);
  });
}

template <class T>
void crossentropy_shard_sumexp(T* sumexp, const T* logits, const T* max, int N, int V, int ld) {
  parallel_for(0, N, static_cast<std::int64_t>(N) * V, [=](int n) {
    const T* z = logits + static_cast<std::int64_t>(n) * ld;
    const T mx = max[n];
    T sum = 0;
    DTRAIN_OMP_SIMD_SUM(sum)
    for (int j = 0; j < V; ++j) sum += exp_any<T>(z[j] - mx);
    sumexp[n] = sum;
  });
}

template <class T>
void crossentropy_shard_finish(T* losses, T* lse, const T* max, const T* sumexp,
                               const T* target_logit, int N) {
  for (int n = 0; n < N; ++n) {
    lse[n] = max[n] + std::log(sumexp[n]);
    losses[n] = (max[n] - target_logit[n]) + std::log(sumexp[n]);  // as the fused kernel's
  }
}

template <class T>
void crossentropy_shard_backward(T* dlogits, const T* logits, const T* lse,
                                 const std::int32_t* targets, const T* dlosses, int N, int V,
                                 int ld, int vocab_start) {
  parallel_for(0, N, static_cast<std::int64_t>(N) * V, [=](int n) {
    const T* z = logits + static_cast<std::int64_t>(n) * ld;
    T* dz = dlogits + static_cast<std::int64_t>(n) * ld;
    const T l = lse[n], d = dlosses[n];
    for (int j = 0; j < V; ++j) dz[j] = exp_any<T>(z[j] - l) * d;  // element-wise: safe in place
    if (owns(targets[n], vocab_start, V)) dz[targets[n] - vocab_start] -= d;
    for (int j = V; j < ld; ++j) dz[j] = 0;
  });
}

#define DTRAIN_INSTANTIATE(T)                                                                 \
  template void crossentropy_shard_stats<T>(T*, T*, const T*, const std::int32_t*, int, int,  \
                                            int, int);                                        \
  template void crossentropy_shard_sumexp<T>(T*, const T*, const T*, int, int, int);          \
  template void crossentropy_shard_finish<T>(T*, T*, const T*, const T*, const T*, int);      \
  template void crossentropy_shard_backward<T>(T*, const T*, const T*, const std::int32_t*,   \
                                               const T*, int, int, int, int);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
