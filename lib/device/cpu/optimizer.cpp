// Optimiser updates over flat ranges. They are pure functions of their buffers, so the same
// code updates a whole arena, one parameter, or one ZeRO shard.
#include <cmath>

#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

namespace dtrain::cpu {

template <class T>
void adamw(T* param, const T* grad, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2, T eps,
           T weight_decay, int step, T grad_scale) {
  // Bias corrections computed once in double: beta^step underflows gracefully for large step.
  const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), step)));
  const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), step)));
  parallel_for(0, n, n, [=](std::int64_t i) {
    const T g = grad[i] * grad_scale;
    const T mi = beta1 * m[i] + (T(1) - beta1) * g;
    const T vi = beta2 * v[i] + (T(1) - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    // Decoupled weight decay (Loshchilov & Hutter): applied to the weight, not via the grad.
    param[i] -= lr * (mi * c1 / (std::sqrt(vi * c2) + eps) + weight_decay * param[i]);
  });
}

template <class T>
void sgd(T* param, const T* grad, T* mom, std::int64_t n, T lr, T momentum, T weight_decay,
         T grad_scale) {
  if (mom == nullptr || momentum == T(0)) {
    parallel_for(0, n, n,
                 [=](std::int64_t i) { param[i] -= lr * (grad[i] * grad_scale + weight_decay * param[i]); });
    return;
  }
  parallel_for(0, n, n, [=](std::int64_t i) {
    const T g = grad[i] * grad_scale + weight_decay * param[i];
    const T b = momentum * mom[i] + g;
    mom[i] = b;
    param[i] -= lr * b;
  });
}

#define DTRAIN_INSTANTIATE(T)                                                                \
  template void adamw<T>(T*, const T*, T*, T*, std::int64_t, T, T, T, T, T, int, T);         \
  template void sgd<T>(T*, const T*, T*, std::int64_t, T, T, T, T);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
