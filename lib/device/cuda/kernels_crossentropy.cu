// Softmax cross-entropy over the vocabulary, one block per row of logits, for the whole
// vocabulary and for one vocabulary-parallel shard. Only the first V columns are read;
// padding columns get a zero gradient, so whatever they hold cannot change the loss.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {

__device__ inline bool owns(std::int32_t target, int vocab_start, int V) {
  const std::int64_t j = static_cast<std::int64_t>(target) - vocab_start;
  return j >= 0 && j < V;
}

// max and sum of exp(z - max) over z[0..V)
__device__ inline void row_max_sumexp(const float* z, int V, float* shared, float& mx,
                                      float& sum) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, z[j]);
  mx = block_max(m, shared);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(z[j] - mx);
  sum = block_sum(s, shared);
}

__global__ void crossentropy_forward_kernel(float* losses, float* lse, const float* logits,
                                            const std::int32_t* targets, int V, int Vp) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* z = logits + n * Vp;
  float mx, sum;
  row_max_sumexp(z, V, shared, mx, sum);
  if (threadIdx.x == 0) {
    const float l = mx + logf(sum);
    lse[n] = l;
    losses[n] = l - z[targets[n]];
  }
}

// dz[j] = exp(z[j] - lse) * d, minus d at the target (owned by this shard); padding 0.
// Each element is read and written by the same thread, so dlogits may alias logits.
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                             const std::int32_t* targets, const float* dlosses,
                                             int V, int ld, int vocab_start) {
  const std::int64_t n = blockIdx.x;
  const float* z = logits + n * ld;
  float* dz = dlogits + n * ld;
  const float l = lse[n], d = dlosses[n];
  const std::int32_t target = targets[n];
  const int own = owns(target, vocab_start, V) ? target - vocab_start : -1;
  for (int j = threadIdx.x; j < ld; j += blockDim.x) {
    float g = 0.0f;
    if (j < V) {
      g = expf(z[j] - l) * d;
      if (j == own) g -= d;
    }
    dz[j] = g;
  }
}

__global__ void shard_stats_kernel(float* max, float* target_logit, const float* logits,
                                   const std::int32_t* targets, int V, int ld, int vocab_start) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* z = logits + n * ld;
  float m = -INFINITY;  // an empty shard must not win the max
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, z[j]);
  m = block_max(m, shared);
  if (threadIdx.x == 0) {
    max[n] = m;
    // 0 on the shards that do not own the target, so a sum over shards picks the owner's
    const std::int32_t t = targets[n];
    target_logit[n] = owns(t, vocab_start, V) ? z[t - vocab_start] : 0.0f;
  }
}

__global__ void shard_sumexp_kernel(float* sumexp, const float* logits, const float* max, int V,
                                    int ld) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* z = logits + n * ld;
  const float mx = max[n];
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(z[j] - mx);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) sumexp[n] = s;
}

__global__ void shard_finish_kernel(float* losses, float* lse, const float* max,
                                    const float* sumexp, const float* target_logit, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float l = max[n] + logf(sumexp[n]);
  lse[n] = l;
  losses[n] = l - target_logit[n];
}

}  // namespace

void crossentropy_forward(cudaStream_t s, float* losses, float* lse, const float* logits,
                          const std::int32_t* targets, int N, int V, int Vp) {
  if (N <= 0) return;
  crossentropy_forward_kernel<<<N, kThreads, 0, s>>>(losses, lse, logits, targets, V, Vp);
  check_launch("crossentropy_forward");
}

void crossentropy_backward(cudaStream_t s, float* dlogits, const float* logits, const float* lse,
                           const std::int32_t* targets, const float* dlosses, int N, int V,
                           int Vp) {
  if (N <= 0) return;
  crossentropy_backward_kernel<<<N, kThreads, 0, s>>>(dlogits, logits, lse, targets, dlosses, V,
                                                      Vp, 0);
  check_launch("crossentropy_backward");
}

void crossentropy_shard_stats(cudaStream_t s, float* max, float* target_logit,
                              const float* logits, const std::int32_t* targets, int N, int V,
                              int ld, int vocab_start) {
  if (N <= 0) return;
  shard_stats_kernel<<<N, kThreads, 0, s>>>(max, target_logit, logits, targets, V, ld,
                                            vocab_start);
  check_launch("crossentropy_shard_stats");
}

void crossentropy_shard_sumexp(cudaStream_t s, float* sumexp, const float* logits,
                               const float* max, int N, int V, int ld) {
  if (N <= 0) return;
  shard_sumexp_kernel<<<N, kThreads, 0, s>>>(sumexp, logits, max, V, ld);
  check_launch("crossentropy_shard_sumexp");
}

void crossentropy_shard_finish(cudaStream_t s, float* losses, float* lse, const float* max,
                               const float* sumexp, const float* target_logit, int N) {
  if (N <= 0) return;
  shard_finish_kernel<<<(N + kThreads - 1) / kThreads, kThreads, 0, s>>>(losses, lse, max,
                                                                         sumexp, target_logit, N);
  check_launch("crossentropy_shard_finish");
}

void crossentropy_shard_backward(cudaStream_t s, float* dlogits, const float* logits,
                                 const float* lse, const std::int32_t* targets,
                                 const float* dlosses, int N, int V, int ld, int vocab_start) {
  if (N <= 0) return;
  crossentropy_backward_kernel<<<N, kThreads, 0, s>>>(dlogits, logits, lse, targets, dlosses, V,
                                                      ld, vocab_start);
  check_launch("crossentropy_shard_backward");
}

}  // namespace dtrain::cuda
