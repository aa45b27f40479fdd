// One query row against a sequence's cached keys and values (generation): a block per head
// computes the scores of every position into the workspace, their softmax with block-wide
// max and sum, then the weighted sum of the values, a thread per output channel. O(T hs)
// work per head, bound by reading the cache once.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {

__global__ void attention_decode_kernel(float* out, float* workspace, const float* q,
                                        const float* k, const float* v, int T, int hs, int ld,
                                        float scale) {
  __shared__ float reduce[32];
  const int h = blockIdx.x;
  const float* qh = q + h * hs;
  float* p = workspace + static_cast<std::int64_t>(h) * T;
  float mx = -INFINITY;
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    const float* kt = k + static_cast<std::int64_t>(t) * ld + h * hs;
    float s = 0.0f;
    for (int i = 0; i < hs; ++i) s += qh[i] * kt[i];
    p[t] = s * scale;
    mx = fmaxf(mx, p[t]);
  }
  mx = block_max(mx, reduce);  // subtract the max: exp never overflows
  float sum = 0.0f;
  for (int t = threadIdx.x; t < T; t += blockDim.x) {
    p[t] = expf(p[t] - mx);
    sum += p[t];
  }
  // block_sum's barriers also make every thread's p[t] visible to the whole block
  const float inv = 1.0f / block_sum(sum, reduce);
  for (int i = threadIdx.x; i < hs; i += blockDim.x) {
    const float* vi = v + h * hs + i;
    float acc = 0.0f;
    for (int t = 0; t < T; ++t) acc += p[t] * vi[static_cast<std::int64_t>(t) * ld];
    out[h * hs + i] = acc * inv;
  }
}

}  // namespace

void attention_decode(cudaStream_t s, float* out, float* workspace, const float* q,
                      const float* k, const float* v, int T, int C, int NH, int ld) {
  if (T <= 0 || NH <= 0) return;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  attention_decode_kernel<<<NH, kThreads, 0, s>>>(out, workspace, q, k, v, T, hs, ld, scale);
  check_launch("attention_decode");
}

}  // namespace dtrain::cuda
