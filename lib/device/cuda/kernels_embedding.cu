// Token and position embeddings. A token table may be one vocabulary shard holding rows
// [vocab_start, vocab_start + vocab_rows); other tokens give zero rows (the shard that owns
// them supplies them), exactly as on the CPU.
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

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

__global__ void iota_kernel(std::int32_t* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = i;
}

// Positions sorted by token (stable, so in increasing order within a token): the thread of
// (first position of a token, channel) adds all of that token's positions in order, which
// is the CPU's order, so dwte gets the same bits on every run and on both devices.
__global__ void embedding_backward_sorted_kernel(float* dwte, const float* dout,
                                                 const std::int32_t* sorted_tokens,
                                                 const std::int32_t* positions, int N, int C,
                                                 int vocab_start, int vocab_rows) {
  const std::int64_t total = static_cast<std::int64_t>(N) * C;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int k = static_cast<int>(i / C), c = static_cast<int>(i % C);
    const std::int32_t token = sorted_tokens[k];
    if (k > 0 && sorted_tokens[k - 1] == token) continue;  // not the token's first position
    const std::int64_t row = static_cast<std::int64_t>(token) - vocab_start;
    if (row < 0 || row >= vocab_rows) continue;
    float acc = dwte[row * C + c];
    for (int j = k; j < N && sorted_tokens[j] == token; ++j)
      acc += dout[static_cast<std::int64_t>(positions[j]) * C + c];
    dwte[row * C + c] = acc;
  }
}

// Workspace layout: sorted tokens, positions, sorted positions (N int32 each), then CUB's.
std::size_t sort_temp_bytes(int N) {
  std::size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::int32_t*>(nullptr),
                                        static_cast<std::int32_t*>(nullptr),
                                        static_cast<const std::int32_t*>(nullptr),
                                        static_cast<std::int32_t*>(nullptr), N),
        "cub::DeviceRadixSort::SortPairs (size query)");
  return bytes;
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

std::size_t embedding_backward_workspace_bytes(int N) {
  return 3 * static_cast<std::size_t>(N) * sizeof(std::int32_t) + sort_temp_bytes(N) + 256;
}

void embedding_backward(cudaStream_t s, float* dwte, const float* dout,
                        const std::int32_t* tokens, int N, int C, int vocab_start,
                        int vocab_rows, void* workspace) {
  const std::int64_t total = static_cast<std::int64_t>(N) * C;
  if (total <= 0) return;
  auto* sorted_tokens = static_cast<std::int32_t*>(workspace);
  std::int32_t* positions = sorted_tokens + N;
  std::int32_t* sorted_positions = positions + N;
  // CUB's temporary storage after the three arrays, on a 256-byte boundary.
  const auto after = reinterpret_cast<std::uintptr_t>(sorted_positions + N);
  void* temp = reinterpret_cast<void*>((after + 255) / 256 * 256);
  std::size_t temp_bytes = sort_temp_bytes(N);
  iota_kernel<<<blocks_for(N), kThreads, 0, s>>>(positions, N);
  check_launch("embedding_backward (positions)");
  check(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_tokens, positions,
                                        sorted_positions, N, 0, 32, s),
        "cub::DeviceRadixSort::SortPairs");
  embedding_backward_sorted_kernel<<<blocks_for(total), kThreads, 0, s>>>(
      dwte, dout, sorted_tokens, sorted_positions, N, C, vocab_start, vocab_rows);
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
