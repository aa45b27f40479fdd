// One query row against a sequence's cached keys and values (generation), split over the
// positions as flash-decoding does: a block per (head, 64 positions) computes its scores (a
// warp per position), their local max and sum of exponentials and its share of the weighted
// value sum; a second kernel rescales the shares to the global max and adds them. A block
// per head alone would leave most of a GPU idle (12 blocks for GPT-2, each walking a
// thousand cache rows); this gives heads x T/64 blocks.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {

constexpr int kSplitPositions = 64;  // cache rows per block
constexpr int kSplitThreads = 128;

int splits_for(int T) { return (T + kSplitPositions - 1) / kSplitPositions; }

// partial[h][s] = {local max, local sum of exp, hs weighted value sums}.
__global__ void attention_decode_partial_kernel(float* partial, const float* q, const float* k,
                                                const float* v, int T, int hs, int ld,
                                                float scale) {
  __shared__ float p[kSplitPositions];
  __shared__ float reduce[32];
  const int h = blockIdx.x, s = blockIdx.y, splits = gridDim.y;
  const int t0 = s * kSplitPositions, n = min(kSplitPositions, T - t0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float* qh = q + h * hs;
  for (int j = warp; j < n; j += warps) {
    const float* kj = k + static_cast<std::int64_t>(t0 + j) * ld + h * hs;
    float dot = 0.0f;
    for (int i = lane; i < hs; i += 32) dot += qh[i] * kj[i];
    dot = warp_sum(dot);
    if (lane == 0) p[j] = dot * scale;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, p[j]);
  mx = block_max(mx, reduce);  // subtract the max: exp never overflows
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    p[j] = expf(p[j] - mx);
    sum += p[j];
  }
  sum = block_sum(sum, reduce);  // its barriers also make every p[j] visible to the block
  float* out = partial + (static_cast<std::int64_t>(h) * splits + s) * (hs + 2);
  for (int i = threadIdx.x; i < hs; i += blockDim.x) {
    const float* vi = v + static_cast<std::int64_t>(t0) * ld + h * hs + i;
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) acc += p[j] * vi[static_cast<std::int64_t>(j) * ld];
    out[2 + i] = acc;
  }
  if (threadIdx.x == 0) {
    out[0] = mx;
    out[1] = sum;
  }
}

// out[h] = sum_s exp(max_s - M) acc_s / sum_s exp(max_s - M) sum_s, M the largest max_s.
__global__ void attention_decode_combine_kernel(float* out, const float* partial, int hs,
                                                int splits) {
  const int h = blockIdx.x, stride = hs + 2;
  const float* ph = partial + static_cast<std::int64_t>(h) * splits * stride;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, ph[s * stride]);
  float denominator = 0.0f;
  for (int s = 0; s < splits; ++s) denominator += expf(ph[s * stride] - M) * ph[s * stride + 1];
  for (int i = threadIdx.x; i < hs; i += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc += expf(ph[s * stride] - M) * ph[s * stride + 2 + i];
    out[h * hs + i] = acc / denominator;
  }
}

}  // namespace

std::size_t attention_decode_partial_floats(int T, int C, int NH) {
  return static_cast<std::size_t>(NH) * splits_for(T) * (C / NH + 2);
}

void attention_decode(cudaStream_t s, float* out, float* partial, const float* q, const float* k,
                      const float* v, int T, int C, int NH, int ld) {
  if (T <= 0 || NH <= 0) return;
  const int hs = C / NH, splits = splits_for(T);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  attention_decode_partial_kernel<<<dim3(NH, splits), kSplitThreads, 0, s>>>(partial, q, k, v, T,
                                                                             hs, ld, scale);
  check_launch("attention_decode_partial");
  attention_decode_combine_kernel<<<NH, kThreads, 0, s>>>(out, partial, hs, splits);
  check_launch("attention_decode_combine");
}

}  // namespace dtrain::cuda
