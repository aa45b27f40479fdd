// Token and position embeddings. A token table may be one vocabulary shard holding rows
// [vocab_start, vocab_start + vocab_rows); other tokens give zero rows (the shard that owns
// them supplies them), exactly as on the CPU.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte,
                                         int C, int vocab_start, int vocab_rows,
                                         std::int64_t total) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / C, c = i % C;
    const std::int64_t row = static_cast<std::int64_t>(tokens[n]) - vocab_start;
    out[i] = (row >= 0 && row < vocab_rows) ? wte[row * C + c] : 0.0f;
  }
}

// Positions with the same token add into the same row, so the adds are atomic. Their order
// is not fixed: results may differ from run to run in the last bits (the CPU's are exact
// repeats); see docs/cuda.md.
__global__ void embedding_backward_kernel(float* dwte, const float* dout,
                                          const std::int32_t* tokens, int C, int vocab_start,
                                          int vocab_rows, std::int64_t total) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / C, c = i % C;
    const std::int64_t row = static_cast<std::int64_t>(tokens[n]) - vocab_start;
    if (row >= 0 && row < vocab_rows) atomicAdd(dwte + row * C + c, dout[i]);
  }
}

__global__ void positional_forward_kernel(float* out, const float* wpe, std::int64_t TC,
                                          std::int64_t total) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] += wpe[i % TC];
}

// One thread per (t, c): the batch is summed in order b = 0, 1, ..., as on the CPU.
__global__ void positional_backward_kernel(float* dwpe, const float* dout, int B,
                                           std::int64_t TC) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < TC; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += dout[b * TC + i];
    dwpe[i] = acc;
  }
}

}  // namespace

void embedding_forward(cudaStream_t s, float* out, const std::int32_t* tokens, const float* wte,
                       int N, int C, int vocab_start, int vocab_rows) {
  const std::int64_t total = static_cast<std::int64_t>(N) * C;
  if (total <= 0) return;
  embedding_forward_kernel<<<blocks_for(total), kThreads, 0, s>>>(out, tokens, wte, C,
                                                                  vocab_start, vocab_rows, total);
  check_launch("embedding_forward");
}

void embedding_backward(cudaStream_t s, float* dwte, const float* dout,
                        const std::int32_t* tokens, int N, int C, int vocab_start,
                        int vocab_rows) {
  const std::int64_t total = static_cast<std::int64_t>(N) * C;
  if (total <= 0) return;
  embedding_backward_kernel<<<blocks_for(total), kThreads, 0, s>>>(dwte, dout, tokens, C,
                                                                   vocab_start, vocab_rows, total);
  check_launch("embedding_backward");
}

void positional_forward(cudaStream_t s, float* out, const float* wpe, int B, int T, int C) {
  const std::int64_t TC = static_cast<std::int64_t>(T) * C, total = TC * B;
  if (total <= 0) return;
  positional_forward_kernel<<<blocks_for(total), kThreads, 0, s>>>(out, wpe, TC, total);
  check_launch("positional_forward");
}

void positional_backward(cudaStream_t s, float* dwpe, const float* dout, int B, int T, int C) {
  const std::int64_t TC = static_cast<std::int64_t>(T) * C;
  if (TC <= 0 || B <= 0) return;
  positional_backward_kernel<<<blocks_for(TC), kThreads, 0, s>>>(dwpe, dout, B, TC);
  check_launch("positional_backward");
}

}  // namespace dtrain::cuda
