// Element-wise kernels, row broadcasts, column sums and the double-precision sum of squares.
#include <algorithm>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "device/half_bits.hpp"

namespace dtrain::cuda {
namespace {

__global__ void residual_kernel(float* out, const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float* dst, const float* src, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void scale_kernel(float* x, float v, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] *= v;
}

__global__ void fill_kernel(float* x, float v, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void scale_matrix_kernel(float* C, int rows, int cols, int ldc, float beta,
                                    std::int64_t stride_c, std::int64_t total) {
  const std::int64_t per = static_cast<std::int64_t>(rows) * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / per, r = (i % per) / cols, c = i % cols;
    float& x = C[b * stride_c + r * ldc + c];
    x = beta == 0.0f ? 0.0f : x * beta;  // beta 0: C is not read (it may hold NaN), as cuBLAS
  }
}

__global__ void broadcast_rows_kernel(float* out, const float* row, int C, std::int64_t total) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = row[i % C];
}

struct RowLoad {
  const float* src;
  int C;
  __device__ void operator()(int n, int c, float (&v)[1]) const {
    v[0] = src[static_cast<std::int64_t>(n) * C + c];
  }
};

// src[n, c], written on the way into words[n, c] rounded to bf16 (or f16): a GEMM operand's
// column sums and its 16-bit copy in one pass over it.
struct RoundingRowLoad {
  const float* src;
  std::uint16_t* words;
  int C;
  bool bf16;
  __device__ void operator()(int n, int c, float (&v)[1]) const {
    const std::int64_t i = static_cast<std::int64_t>(n) * C + c;
    v[0] = src[i];
    words[i] = bf16 ? halfbits::to_bf16(v[0]) : halfbits::to_f16(v[0]);
  }
};

__global__ void sum_squares_partials_kernel(double* partials, const float* x, std::int64_t n) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double v = x[i];
    acc += v * v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_squares_runs_kernel(double* sums, const float* x, const std::int64_t* starts,
                                        const std::int64_t* lengths, std::int64_t runs) {
  __shared__ double shared[32];
  for (std::int64_t run = blockIdx.x; run < runs; run += gridDim.x) {  // uniform per block
    const float* v = x + starts[run];
    double acc = 0.0;
    for (std::int64_t i = threadIdx.x; i < lengths[run]; i += blockDim.x) {
      const double e = v[i];
      acc += e * e;
    }
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) sums[run] = acc;
  }
}

__global__ void sum_partials_kernel(double* result, const double* partials, int count) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *result = acc;
}

}  // namespace

void residual_forward(cudaStream_t s, float* out, const float* a, const float* b, std::int64_t n) {
  if (n <= 0) return;
  residual_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, a, b, n);
  check_launch("residual_forward");
}

void accumulate(cudaStream_t s, float* dst, const float* src, std::int64_t n) {
  if (n <= 0) return;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n);
  check_launch("accumulate");
}

void scale(cudaStream_t s, float* x, float v, std::int64_t n) {
  if (n <= 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, v, n);
  check_launch("scale");
}

void fill(cudaStream_t s, float* x, float v, std::int64_t n) {
  if (n <= 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, v, n);
  check_launch("fill");
}

void scale_matrix(cudaStream_t s, float* C, int rows, int cols, int ldc, float beta, int batch,
                  std::int64_t stride_c) {
  const std::int64_t total = static_cast<std::int64_t>(rows) * cols * batch;
  if (rows <= 0 || cols <= 0 || batch <= 0) return;
  scale_matrix_kernel<<<blocks_for(total), kThreads, 0, s>>>(C, rows, cols, ldc, beta, stride_c,
                                                             total);
  check_launch("scale_matrix");
}

void broadcast_rows(cudaStream_t s, float* out, const float* row, int N, int C) {
  const std::int64_t total = static_cast<std::int64_t>(N) * C;
  if (total <= 0) return;
  broadcast_rows_kernel<<<blocks_for(total), kThreads, 0, s>>>(out, row, C, total);
  check_launch("broadcast_rows");
}

std::size_t column_sum_scratch_floats(int N, int C) {
  return N <= 0 || C <= 0 ? 0
                          : static_cast<std::size_t>(column_chunks(N)) * static_cast<std::size_t>(C);
}

void column_sum_accumulate(cudaStream_t s, float* dst, const float* src, int N, int C,
                           float* scratch) {
  ColumnTargets<1> t{{dst}};
  column_sums_accumulate<1>(s, t, scratch, N, C, RowLoad{src, C});
  check_launch("column_sum_accumulate");
}

void column_sum_accumulate_and_round(cudaStream_t s, float* dst, std::uint16_t* words,
                                     const float* src, int N, int C, bool bf16, float* scratch) {
  ColumnTargets<1> t{{dst}};
  column_sums_accumulate<1>(s, t, scratch, N, C, RoundingRowLoad{src, words, C, bf16});
  check_launch("column_sum_accumulate_and_round");
}

void sum_squares(cudaStream_t s, double* result, double* partials, const float* x,
                 std::int64_t n) {
  const int blocks = n <= 0 ? 0 : static_cast<int>(std::min<std::int64_t>(
                                      kSumSquaresPartials, (n + kThreads - 1) / kThreads));
  if (blocks > 0) sum_squares_partials_kernel<<<blocks, kThreads, 0, s>>>(partials, x, n);
  sum_partials_kernel<<<1, kThreads, 0, s>>>(result, partials, blocks);
  check_launch("sum_squares");
}

void sum_squares_runs(cudaStream_t s, double* sums, const float* x, const std::int64_t* starts,
                      const std::int64_t* lengths, std::int64_t runs) {
  if (runs <= 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>(runs, kMaxBlocks));
  sum_squares_runs_kernel<<<blocks, kThreads, 0, s>>>(sums, x, starts, lengths, runs);
  check_launch("sum_squares_runs");
}

}  // namespace dtrain::cuda
