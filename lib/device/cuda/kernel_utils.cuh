#pragma once
// Pieces every kernel file shares: launch sizes for grid-stride loops, warp and block
// reductions, and a deterministic two-stage column sum (fixed chunking and a fixed summation
// order, so a result never depends on scheduling).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "device/half_bits.hpp"

namespace dtrain::cuda {

constexpr int kThreads = 256;          // threads per block of element-wise and row kernels
constexpr int kMaxBlocks = 65535;      // grid-stride loops cover the rest
constexpr int kColumnChunkRows = 256;  // rows per partial sum of a column reduction

inline int blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

inline int column_chunks(int N) { return (N + kColumnChunkRows - 1) / kColumnChunkRows; }

// x rounded to bf16 (or f16) bits, for the kernels that write a 16-bit copy of what they
// compute in the same pass.
__device__ inline std::uint16_t round_to(float x, bool bf16) {
  return bf16 ? halfbits::to_bf16(x) : halfbits::to_f16(x);
}

template <class T> __device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the result. `shared`
// holds 32 values; the leading barrier lets the same buffer serve consecutive calls.
template <class T> __device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < warps ? shared[lane] : T(0);
  return warp_sum(r);
}

__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const float r = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(r);
}

// Column sums of K quantities over rows, stage 1: block (32, 8) covers 32 columns of one
// chunk of kColumnChunkRows rows; partials[k][chunk][c] gets that chunk's sum. Load is a
// functor: load(n, c, v) fills v[0..K) for element (n, c).
template <int K, class Load>
__global__ void column_partials_kernel(float* partials, int N, int C, int chunks, Load load) {
  __shared__ float part[K][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  // grid.y is capped at 65535: a block takes every gridDim.y-th chunk (uniform per block)
  for (int chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int r0 = chunk * kColumnChunkRows;
    const int r1 = min(N, r0 + kColumnChunkRows);
    float acc[K];
    for (int k = 0; k < K; ++k) acc[k] = 0.0f;
    if (c < C) {
      for (int n = r0 + threadIdx.y; n < r1; n += 8) {
        float v[K];
        load(n, c, v);
        for (int k = 0; k < K; ++k) acc[k] += v[k];
      }
    }
    __syncthreads();  // the previous chunk's sums have been read
    for (int k = 0; k < K; ++k) part[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      for (int k = 0; k < K; ++k) {
        float s = 0.0f;
        for (int y = 0; y < 8; ++y) s += part[k][y][threadIdx.x];
        partials[(static_cast<std::int64_t>(k) * chunks + chunk) * C + c] = s;
      }
    }
  }
}

// Stage 2: dst[k][c] += sum over chunks, in chunk order.
template <int K> struct ColumnTargets {
  float* dst[K];
};

template <int K>
__global__ void column_finish_kernel(ColumnTargets<K> targets, const float* partials, int chunks,
                                     int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int k = 0; k < K; ++k) {
    float s = 0.0f;
    for (int j = 0; j < chunks; ++j) s += partials[(static_cast<std::int64_t>(k) * chunks + j) * C + c];
    targets.dst[k][c] += s;
  }
}

// Both stages; partials holds K * column_chunks(N) * C floats.
template <int K, class Load>
void column_sums_accumulate(cudaStream_t stream, ColumnTargets<K> targets, float* partials,
                            int N, int C, Load load) {
  if (N <= 0 || C <= 0) return;
  const int chunks = column_chunks(N);
  const dim3 grid((C + 31) / 32, chunks < kMaxBlocks ? chunks : kMaxBlocks), block(32, 8);
  column_partials_kernel<K, Load><<<grid, block, 0, stream>>>(partials, N, C, chunks, load);
  column_finish_kernel<K><<<(C + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      targets, partials, chunks, C);
}

}  // namespace dtrain::cuda
