// LayerNorm over the last dimension, one block per row. Like the CPU kernel it takes the mean
// first and then the centred variance (no cancellation for rows with a large mean), with
// eps = 1e-5 inside the square root.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {

constexpr float kEps = 1e-5f;  // cpu::kLayerNormEps

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int C) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* x = inp + n * C;
  float* o = out + n * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float m = block_sum(s, shared) / static_cast<float>(C);
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float var = block_sum(v, shared) / static_cast<float>(C);
  const float r = 1.0f / sqrtf(var + kEps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = (x[c] - m) * r * weight[c] + bias[c];
  if (threadIdx.x == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight.
__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int C) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* x = inp + n * C;
  const float* d = dout + n * C;
  float* dx = dinp + n * C;
  const float m = mean[n], s = rstd[n];
  float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (x[c] - m) * s;
    const float dn = d[c] * weight[c];
    sum_dn += dn;
    sum_dn_xhat += dn * xhat;
  }
  const float a = block_sum(sum_dn, shared) / static_cast<float>(C);
  const float b = block_sum(sum_dn_xhat, shared) / static_cast<float>(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (x[c] - m) * s;
    dx[c] += s * (d[c] * weight[c] - a - xhat * b);
  }
}

// Per element (n, c): dweight gets dout * xhat, dbias gets dout.
struct ParamGradLoad {
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int n, int c, float (&v)[2]) const {
    const std::int64_t i = static_cast<std::int64_t>(n) * C + c;
    const float d = dout[i];
    v[0] = d * ((inp[i] - mean[n]) * rstd[n]);
    v[1] = d;
  }
};

}  // namespace

void layernorm_forward(cudaStream_t s, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  layernorm_forward_kernel<<<N, kThreads, 0, s>>>(out, mean, rstd, inp, weight, bias, C);
  check_launch("layernorm_forward");
}

std::size_t layernorm_backward_scratch_floats(int N, int C) {
  return 2 * column_sum_scratch_floats(N, C);
}

void layernorm_backward(cudaStream_t s, float* dinp, float* dweight, float* dbias,
                        const float* dout, const float* inp, const float* weight,
                        const float* mean, const float* rstd, int N, int C, float* scratch) {
  if (N <= 0 || C <= 0) return;
  layernorm_backward_input_kernel<<<N, kThreads, 0, s>>>(dinp, dout, inp, weight, mean, rstd, C);
  check_launch("layernorm_backward (input)");
  ColumnTargets<2> t{{dweight, dbias}};
  column_sums_accumulate<2>(s, t, scratch, N, C, ParamGradLoad{dout, inp, mean, rstd, C});
  check_launch("layernorm_backward (parameters)");
}

}  // namespace dtrain::cuda
