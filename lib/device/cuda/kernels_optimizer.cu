// Optimiser updates over flat ranges (a whole arena, one parameter or one ZeRO shard), with
// the formulas of the CPU kernels.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "dtrain/device/device.hpp"

namespace dtrain::cuda {
namespace {

struct AdamWStep {
  float lr, beta1, beta2, eps, c1, c2, grad_scale;
};

__device__ inline void adamw_element(float* param, const float* grad, float* m, float* v,
                                     std::int64_t i, const AdamWStep& a, float weight_decay) {
  const float g = grad[i] * a.grad_scale;
  const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
  const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  // decoupled weight decay: applied to the weight, not through the gradient
  const float p = param[i];
  param[i] = p - a.lr * (mi * a.c1 / (sqrtf(vi * a.c2) + a.eps) + weight_decay * p);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::int64_t n,
                             AdamWStep a, float weight_decay) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    adamw_element(param, grad, m, v, i, a, weight_decay);
}

// Up to kRangesPerLaunch ranges in one launch, passed by value: range r has blocks
// [first_block[r], first_block[r + 1]) of the grid, which stride over its elements.
constexpr int kRangesPerLaunch = 32;
constexpr int kMaxBlocksPerRange = 2048;
struct AdamWRanges {
  std::int64_t param[kRangesPerLaunch], grad[kRangesPerLaunch], state[kRangesPerLaunch],
      n[kRangesPerLaunch];
  float weight_decay[kRangesPerLaunch];
  int first_block[kRangesPerLaunch + 1];
  int count;
};

__global__ void adamw_ranges_kernel(float* param, const float* grad, float* m, float* v,
                                    AdamWRanges ranges, AdamWStep a) {
  int r = 0;  // this block's range (the same for all its threads)
  while (r + 1 < ranges.count && ranges.first_block[r + 1] <= static_cast<int>(blockIdx.x)) ++r;
  const int block = blockIdx.x - ranges.first_block[r];
  const int blocks = ranges.first_block[r + 1] - ranges.first_block[r];
  float* p = param + ranges.param[r];
  const float* g = grad + ranges.grad[r];
  float* mr = m + ranges.state[r];
  float* vr = v + ranges.state[r];
  for (std::int64_t i = static_cast<std::int64_t>(block) * blockDim.x + threadIdx.x;
       i < ranges.n[r]; i += static_cast<std::int64_t>(blocks) * blockDim.x)
    adamw_element(p, g, mr, vr, i, a, ranges.weight_decay[r]);
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
  const AdamWStep a{lr, beta1, beta2, eps, c1, c2, grad_scale};
  adamw_kernel<<<blocks_for(n), kThreads, 0, s>>>(param, grad, m, v, n, a, weight_decay);
  check_launch("adamw");
}

void adamw_ranges(cudaStream_t s, float* param, const float* grad, float* m, float* v,
                  const AdamWRange* ranges, std::size_t count, float lr, float beta1, float beta2,
                  float eps, float c1, float c2, float grad_scale) {
  const AdamWStep a{lr, beta1, beta2, eps, c1, c2, grad_scale};
  AdamWRanges batch{};
  auto launch = [&] {
    if (batch.count == 0) return;
    const int blocks = batch.first_block[batch.count];
    adamw_ranges_kernel<<<blocks, kThreads, 0, s>>>(param, grad, m, v, batch, a);
    check_launch("adamw_ranges");
    batch.count = 0;
  };
  for (std::size_t i = 0; i < count; ++i) {
    const AdamWRange& r = ranges[i];
    if (r.n <= 0) continue;
    const int k = batch.count;
    batch.param[k] = r.param;
    batch.grad[k] = r.grad;
    batch.state[k] = r.state;
    batch.n[k] = r.n;
    batch.weight_decay[k] = r.weight_decay;
    const std::int64_t wanted = (r.n + kThreads - 1) / kThreads;
    batch.first_block[k + 1] = batch.first_block[k] + static_cast<int>(
        wanted < kMaxBlocksPerRange ? wanted : kMaxBlocksPerRange);
    if (++batch.count == kRangesPerLaunch) launch();
  }
  launch();
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
