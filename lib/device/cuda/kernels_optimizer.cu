// Optimiser updates over flat ranges (a whole arena, one parameter or one ZeRO shard), with
// the formulas of the CPU kernels.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::int64_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float c1, float c2, float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    // decoupled weight decay: applied to the weight, not through the gradient
    const float p = param[i];
    param[i] = p - lr * (mi * c1 / (sqrtf(vi * c2) + eps) + weight_decay * p);
  }
}

__global__ void sgd_plain_kernel(float* param, const float* grad, std::int64_t n, float lr,
                                 float weight_decay, float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float p = param[i];
    param[i] = p - lr * (grad[i] * grad_scale + weight_decay * p);
  }
}

__global__ void sgd_momentum_kernel(float* param, const float* grad, float* mom, std::int64_t n,
                                    float lr, float momentum, float weight_decay,
                                    float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * grad_scale + weight_decay * param[i];
    const float b = momentum * mom[i] + g;
    mom[i] = b;
    param[i] -= lr * b;
  }
}

}  // namespace

void adamw(cudaStream_t s, float* param, const float* grad, float* m, float* v, std::int64_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, float c1, float c2,
           float grad_scale) {
  if (n <= 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, s>>>(param, grad, m, v, n, lr, beta1, beta2, eps,
                                                  weight_decay, c1, c2, grad_scale);
  check_launch("adamw");
}

void sgd(cudaStream_t s, float* param, const float* grad, float* mom, std::int64_t n, float lr,
         float momentum, float weight_decay, float grad_scale) {
  if (n <= 0) return;
  if (mom == nullptr || momentum == 0.0f) {
    sgd_plain_kernel<<<blocks_for(n), kThreads, 0, s>>>(param, grad, n, lr, weight_decay,
                                                        grad_scale);
  } else {
    sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, s>>>(param, grad, mom, n, lr, momentum,
                                                           weight_decay, grad_scale);
  }
  check_launch("sgd");
}

}  // namespace dtrain::cuda
