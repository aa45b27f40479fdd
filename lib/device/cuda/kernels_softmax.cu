// The fused causal softmax of attention: one warp per score row, reading the row once for the
// max, once for exp and sum, writing the probabilities and zeroing the masked upper triangle
// in the same pass. The backward is fused the same way.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {

constexpr int kWarpsPerBlock = kThreads / 32;

__global__ void causal_softmax_forward_kernel(float* att, std::int64_t rows, int T) {
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const int t = static_cast<int>(row % T);  // query position: keys 0..t are visible
  float* p = att + row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, p[j]);
  mx = warp_max(mx);  // subtract the max: exp never overflows
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) {
    const float e = expf(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j <= t; j += 32) p[j] *= inv;
  for (int j = t + 1 + lane; j < T; j += 32) p[j] = 0.0f;
}

__global__ void causal_softmax_backward_kernel(float* dP, const float* P, std::int64_t rows,
                                               int T, float scale) {
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const int t = static_cast<int>(row % T);
  float* d = dP + row * T;
  const float* p = P + row * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j <= t; j += 32) d[j] = p[j] * (d[j] - dot) * scale;
  for (int j = t + 1 + lane; j < T; j += 32) d[j] = 0.0f;
}

int row_blocks(std::int64_t rows) {
  return static_cast<int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void causal_softmax_forward(cudaStream_t s, float* att, std::int64_t matrices, int T) {
  const std::int64_t rows = matrices * T;
  if (rows <= 0) return;
  causal_softmax_forward_kernel<<<row_blocks(rows), kThreads, 0, s>>>(att, rows, T);
  check_launch("causal_softmax_forward");
}

void causal_softmax_backward(cudaStream_t s, float* dP, const float* P, std::int64_t matrices,
                             int T, float scale) {
  const std::int64_t rows = matrices * T;
  if (rows <= 0) return;
  causal_softmax_backward_kernel<<<row_blocks(rows), kThreads, 0, s>>>(dP, P, rows, T, scale);
  check_launch("causal_softmax_backward");
}

}  // namespace dtrain::cuda
