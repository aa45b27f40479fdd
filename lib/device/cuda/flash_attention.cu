// Fused causal attention on tensor cores for 16-bit GEMM operands (FlashAttention-2's
// scheme): the T x T scores and probabilities live only in registers.
// Forward keeps a running row maximum and sum (the online softmax) and saves, per query row,
// the log-sum-exp of its scaled scores; backward recomputes the probabilities from it.
//
// A block of 4 warps covers 64 rows (queries, or keys in the dK/dV kernel) and walks the
// blocks of columns it needs; its tiles and products are flash_attention_tiles.cuh's. The
// row-wise softmax reduces over the 4 lanes of a row; a product's scores, once rounded, are
// the next product's left operand as they lie. Only the 64-row tiles that every warp reads
// (K and V, or Q and dout) pass through shared memory, in two buffers: the next block's tiles
// load (by cp.async, where they are 16-bit words on 16-byte aligned rows) while the warps work
// on the current. Q, K, V and dout are rounded to bf16/fp16 where they enter shared memory,
// as cuBLAS rounds the operands of the unfused path; products accumulate in fp32, the
// softmax is fp32.
//
// Backward runs without atomics, so it is deterministic: one kernel accumulates dK and dV
// per key block over the query blocks at or after it, another dQ per query block over the
// key blocks up to it (the scores are recomputed in both). It writes dqkv in fp32, or as
// 16-bit words for the GEMMs of the linear layer before (qkv's), with each block's column
// sums of its fp32 rows for that layer's bias gradient, which one pass then adds up.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/flash_attention_tiles.cuh"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "device/half_bits.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::cuda {
namespace {

using namespace flash;

constexpr float kLog2e = 1.4426950408889634f;

// The saved log-sum-exp (base 2, of the scaled scores) in two floats: the leading part is
// rounded to bf16, so 16-bit saved activations (which round every float) keep about 16
// significant bits of it instead of 8.
__device__ inline void save_lse(float* lse, float value) {
  const float hi = halfbits::round_bf16(value);
  lse[0] = hi;
  lse[1] = value - hi;
}
__device__ inline float load_lse(const float* lse) { return lse[0] + lse[1]; }

// Where backward puts dqkv: fp32 (added into where accumulate), or 16-bit words of H written
// over, with each block's column sums in partials[chunk][3C], chunk = b * (row blocks) + the
// block's row block.
struct GradOut {
  float* dqkv = nullptr;
  std::uint16_t* dqkv16 = nullptr;
  float* partials = nullptr;
  bool accumulate = false;
};

// The column sums of a block's 64 rows, each warp's 16 in acc, into partial[0, HS): a lane's
// rows g and g + 8, then the warp's 8 row groups, then the 4 warps in order (deterministic).
// Rows at or past T hold zeros (their probabilities are zero), so they add nothing.
template <int HS>
__device__ void write_column_sums(float* partial, const Acc<HS>& acc, float (&sums)[kWarps][HS]) {
  const int lane = lane_id(), warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call's sums have been read
  #pragma unroll
  for (int n = 0; n < HS / 8; ++n)
    #pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v = acc[n][e] + acc[n][e + 2];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (lane < 4) sums[warp][8 * n + column_of(e)] = v;
    }
  __syncthreads();
  for (int c = threadIdx.x; c < HS; c += kBlockThreads) {
    float s = 0.0f;
    #pragma unroll
    for (int w = 0; w < kWarps; ++w) s += sums[w][c];
    partial[c] = s;
  }
}

// A block's rows of dQ, dK or dV as `grad` wants them: `at` is where the head's part starts in
// dqkv (the sequence's row 0), `column` the same place within a row of 3C. The words are what
// rounding the fp32 rows gives.
template <int HS, class H>
__device__ void store_gradient(const GradOut& grad, std::int64_t at, std::int64_t chunk,
                               int column, int C3, int row0, int T, const Acc<HS>& acc,
                               float (&sums)[kWarps][HS]) {
  if (!grad.dqkv16) {
    write_rows<HS>(grad.dqkv + at, C3, row0, T, acc, grad.accumulate);
    return;
  }
  write_rows_16bit<HS, H>(grad.dqkv16 + at, C3, row0, T, acc);
  write_column_sums<HS>(grad.partials + chunk * C3 + column, acc, sums);
}

// In (qkv's type): float, or 16-bit words of H.
template <int HS, class H, class In>
__global__ void __launch_bounds__(kBlockThreads)
    flash_forward_kernel(float* out, std::uint16_t* out16, float* lse, const In* qkv, int T,
                         int C, int NH, float scale) {
  __shared__ Shared<HS> s;
  // the last query blocks, which walk the most key blocks, start first (a shorter tail)
  const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const In* q = qkv + static_cast<std::int64_t>(b) * T * C3 + h * HS;
  const int q0 = qb * kRows, row0 = q0 + warp * kWarpRows;
  const float scale2 = scale * kLog2e;

  load_rows<HS, H>(s.a[1], q, C3, q0, T);
  __syncthreads();
  Rows<HS> qf;
  load_rows_as_operands<HS>(qf, s.a[1], warp);
  Acc<HS> o;
  zero<HS>(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8: running max, sum
  start_rows<HS, H>(s.a[0], q + C, C3, 0, T);
  start_rows<HS, H>(s.b[0], q + 2 * C, C3, 0, T);
  commit_async_copies();

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kRows, cur = kb & 1;
    __syncthreads();  // every warp is done with the other buffer (the last K, V; or Q)
    if (kb < qb) {
      start_rows<HS, H>(s.a[cur ^ 1], q + C, C3, k0 + kRows, T);
      start_rows<HS, H>(s.b[cur ^ 1], q + 2 * C, C3, k0 + kRows, T);
    }
    commit_async_copies();  // (empty after the last block: the wait below stays right)
    wait_async_copies<1>();  // this block's tiles are in; the next block's may be on the way
    __syncthreads();
    const Groups g = keys_seen(kb == qb, warp);
    Scores x;
    times_rows_transposed<HS, H>(x, qf, s.a[cur], g);
    float mx[2] = {-INFINITY, -INFINITY};
    #pragma unroll
    for (int j = 0; j < kColumnTiles; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool seen = k0 + 8 * j + column_of(e) <= row0 + row_of(e);
        x[j][e] = seen ? x[j][e] * scale2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], x[j][e]);
      }
    float base[2], alpha[2], sum[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], row_max(mx[r]));
      base[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row that sees no key yet
      alpha[r] = exp2f(m[r] - base[r]);
      m[r] = m_new;
    }
    #pragma unroll
    for (int j = 0; j < kColumnTiles; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[j][e] = exp2f(x[j][e] - base[e >> 1]);
        sum[e >> 1] += x[j][e];
      }
    #pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + row_sum(sum[r]);
    #pragma unroll
    for (int n = 0; n < HS / 8; ++n)
      #pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e >> 1];
    Operands p;
    to_operands<H>(p, x);
    accumulate_times_rows<HS, H>(o, p, s.b[cur], g);
  }

  #pragma unroll
  for (int n = 0; n < HS / 8; ++n)
    #pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] /= l[e >> 1];
  const std::int64_t head_out = static_cast<std::int64_t>(b) * T * C + h * HS;
  if (out) write_rows<HS>(out + head_out, C, row0, T, o, false);
  if (out16) write_rows_16bit<HS, H>(out16 + head_out, C, row0, T, o);
  if ((lane_id() & 3) != 0) return;
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = row0 + row_of(2 * r);
    if (qi < T) save_lse(lse + 2 * ((static_cast<std::int64_t>(b) * NH + h) * T + qi), m[r] + log2f(l[r]));
  }
}

// dsum[b, h, t] = dout[b, t, head h] · out[b, t, head h]: the row sums of P * dP that the
// softmax gradient subtracts. One warp per row. Dout, Out: float, or 16-bit words of H.
// Where dout16 is set, writes dout rounded to H into it on the way: the other kernels' tiles
// then copy words instead of rounding dout again for every block that loads it.
template <class H, class Dout, class Out>
__global__ void flash_dsum_kernel(float* dsum, std::uint16_t* dout16, const Dout* dout,
                                  const Out* out, int B, int T, int C, int NH) {
  const int hs = C / NH, lane = threadIdx.x & 31;
  const std::int64_t rows = static_cast<std::int64_t>(B) * NH * T;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (std::int64_t i = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < rows;
       i += warps) {
    const std::int64_t t = i % T, bh = i / T, h = bh % NH, b = bh / NH;
    const std::int64_t at = (b * T + t) * C + h * hs;
    float v = 0.0f;
    for (int c = lane; c < hs; c += 32) {
      const float dy = value_at<H>(dout, at + c);
      v += dy * value_at<H>(out, at + c);
      if (dout16) dout16[at + c] = static_cast<std::uint16_t>(pack<H>(dy, 0.0f));
    }
    v = warp_sum(v);
    if (lane == 0) dsum[i] = v;
  }
}

// dK and dV of one key block, over the query blocks at or after it. Rows are keys here, so
// each warp works on S^T (its 16 keys x 64 queries). In (qkv's type): float, or 16-bit words
// of H.
template <int HS, class H, class In>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_dkv_kernel(GradOut grad, const std::uint16_t* dout, const In* qkv,
                              const float* lse, const float* dsum, int T, int C, int NH,
                              float scale) {
  __shared__ Shared<HS> s;
  __shared__ float sums[kWarps][HS];
  const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const std::int64_t head = static_cast<std::int64_t>(b) * T * C3 + h * HS;
  const In* q = qkv + head;
  const std::uint16_t* dy = dout + static_cast<std::int64_t>(b) * T * C + h * HS;
  const std::int64_t stats = (static_cast<std::int64_t>(b) * NH + h) * T;
  const int k0 = kb * kRows, row0 = k0 + warp * kWarpRows;
  const float scale2 = scale * kLog2e;

  load_rows<HS, H>(s.a[1], q + C, C3, k0, T);
  load_rows<HS, H>(s.b[1], q + 2 * C, C3, k0, T);
  __syncthreads();
  Rows<HS> kf, vf;
  load_rows_as_operands<HS>(kf, s.a[1], warp);
  load_rows_as_operands<HS>(vf, s.b[1], warp);
  Acc<HS> dk, dv;
  zero<HS>(dk);
  zero<HS>(dv);
  // query block qb's Q and dout tiles, log-sum-exps and row sums into buffer `buf`
  auto start_block = [&](int qb, int buf) {
    const int q0 = qb * kRows;
    start_rows<HS, H>(s.a[buf], q, C3, q0, T);
    start_rows<HS, H>(s.b[buf], dy, C, q0, T);
    if (threadIdx.x < kRows) {
      const int qi = q0 + threadIdx.x;
      s.lse[buf][threadIdx.x] = qi < T ? load_lse(lse + 2 * (stats + qi)) : 0.0f;
      s.dsum[buf][threadIdx.x] = qi < T ? dsum[stats + qi] : 0.0f;
    }
  };
  start_block(kb, 0);
  commit_async_copies();

  for (int qb = kb; qb * kRows < T; ++qb) {
    const int q0 = qb * kRows, cur = (qb - kb) & 1;
    __syncthreads();  // every warp is done with the other buffer (the last Q, dout; or K, V)
    if ((qb + 1) * kRows < T) start_block(qb + 1, cur ^ 1);
    commit_async_copies();
    wait_async_copies<1>();
    __syncthreads();
    const std::uint16_t *sq = s.a[cur], *sdy = s.b[cur];
    const float *slse = s.lse[cur], *sdsum = s.dsum[cur];
    const Groups g = queries_seeing(qb == kb, warp);
    Scores p, dp;
    times_rows_transposed<HS, H>(p, kf, sq, g);  // S^T = K Q^T
    #pragma unroll
    for (int j = 0; j < kColumnTiles; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + column_of(e), qi = q0 + col;
        const bool seen = row0 + row_of(e) <= qi && qi < T;
        p[j][e] = seen ? exp2f(p[j][e] * scale2 - slse[col]) : 0.0f;
      }
    Operands a;
    to_operands<H>(a, p);
    accumulate_times_rows<HS, H>(dv, a, sdy, g);  // dV += P^T dout
    times_rows_transposed<HS, H>(dp, vf, sdy, g);  // dP^T = V dout^T
    #pragma unroll
    for (int j = 0; j < kColumnTiles; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e)
        dp[j][e] = p[j][e] * (dp[j][e] - sdsum[8 * j + column_of(e)]) * scale;
    to_operands<H>(a, dp);
    accumulate_times_rows<HS, H>(dk, a, sq, g);  // dK += dS^T Q
  }

  const std::int64_t chunk = static_cast<std::int64_t>(b) * gridDim.x + kb;
  store_gradient<HS, H>(grad, head + C, chunk, C + h * HS, 3 * C, row0, T, dk, sums);
  store_gradient<HS, H>(grad, head + 2 * C, chunk, 2 * C + h * HS, 3 * C, row0, T, dv, sums);
}

// dQ of one query block, over the key blocks up to it.
template <int HS, class H, class In>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_dq_kernel(GradOut grad, const std::uint16_t* dout, const In* qkv,
                             const float* lse, const float* dsum, int T, int C, int NH,
                             float scale) {
  __shared__ Shared<HS> s;
  __shared__ float sums[kWarps][HS];
  // the last query blocks, which walk the most key blocks, start first (a shorter tail)
  const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const std::int64_t head = static_cast<std::int64_t>(b) * T * C3 + h * HS;
  const In* q = qkv + head;
  const std::uint16_t* dy = dout + static_cast<std::int64_t>(b) * T * C + h * HS;
  const int q0 = qb * kRows, row0 = q0 + warp * kWarpRows;
  const std::int64_t stats = (static_cast<std::int64_t>(b) * NH + h) * T;
  float row_lse[2], row_dsum[2];  // rows g, g + 8
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = row0 + row_of(2 * r);
    row_lse[r] = qi < T ? load_lse(lse + 2 * (stats + qi)) : 0.0f;
    row_dsum[r] = qi < T ? dsum[stats + qi] : 0.0f;
  }
  const float scale2 = scale * kLog2e;

  load_rows<HS, H>(s.a[1], q, C3, q0, T);
  load_rows<HS, H>(s.b[1], dy, C, q0, T);
  __syncthreads();
  Rows<HS> qf, dyf;
  load_rows_as_operands<HS>(qf, s.a[1], warp);
  load_rows_as_operands<HS>(dyf, s.b[1], warp);
  Acc<HS> dq;
  zero<HS>(dq);
  start_rows<HS, H>(s.a[0], q + C, C3, 0, T);
  start_rows<HS, H>(s.b[0], q + 2 * C, C3, 0, T);
  commit_async_copies();

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kRows, cur = kb & 1;
    __syncthreads();  // every warp is done with the other buffer (the last K, V; or Q, dout)
    if (kb < qb) {
      start_rows<HS, H>(s.a[cur ^ 1], q + C, C3, k0 + kRows, T);
      start_rows<HS, H>(s.b[cur ^ 1], q + 2 * C, C3, k0 + kRows, T);
    }
    commit_async_copies();
    wait_async_copies<1>();
    __syncthreads();
    const Groups g = keys_seen(kb == qb, warp);
    Scores p, dp;
    times_rows_transposed<HS, H>(p, qf, s.a[cur], g);   // S = Q K^T
    times_rows_transposed<HS, H>(dp, dyf, s.b[cur], g);  // dP = dout V^T
    #pragma unroll
    for (int j = 0; j < kColumnTiles; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = row0 + row_of(e);
        const bool seen = k0 + 8 * j + column_of(e) <= qi && qi < T;
        const float pe = seen ? exp2f(p[j][e] * scale2 - row_lse[e >> 1]) : 0.0f;
        dp[j][e] = pe * (dp[j][e] - row_dsum[e >> 1]) * scale;
      }
    Operands a;
    to_operands<H>(a, dp);
    accumulate_times_rows<HS, H>(dq, a, s.a[cur], g);  // dQ += dS K
  }
  const std::int64_t chunk = static_cast<std::int64_t>(b) * gridDim.x + qb;
  store_gradient<HS, H>(grad, head, chunk, h * HS, 3 * C, row0, T, dq, sums);
}

int blocks_of_rows(int T) { return (T + kRows - 1) / kRows; }

// The grid is (row blocks, heads, sequences): CUDA's third grid dimension ends at 65535.
void check_grid(int B, int NH) {
  DTRAIN_CHECK(B <= 65535 && NH <= 65535, Errc::invalid_argument,
               "the fused attention runs at most 65535 sequences and heads at once, got "
                   << B << " sequences of " << NH << " heads: a smaller --micro-batch, or "
                   << "DTRAIN_CUDA_FUSED_ATTENTION=0");
}

template <int HS, class H> struct Forward {
  static void run(cudaStream_t stream, float* out, std::uint16_t* out16, float* lse,
                  const float* qkv, const std::uint16_t* qkv16, int B, int T, int C, int NH) {
    const dim3 grid(blocks_of_rows(T), NH, B);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    if (qkv16) {
      flash_forward_kernel<HS, H, std::uint16_t><<<grid, kBlockThreads, 0, stream>>>(
          out, out16, lse, qkv16, T, C, NH, scale);
    } else {
      flash_forward_kernel<HS, H, float><<<grid, kBlockThreads, 0, stream>>>(
          out, out16, lse, qkv, T, C, NH, scale);
    }
    DTRAIN_CUDA(cudaGetLastError());
  }
};

// The backward's scratch: dsum (B x NH x T floats, rounded up to 16 bytes), dout in 16-bit
// words (B x T x C, rounded up to 16 bytes), then, where dqkv goes into words, the blocks'
// column sums (B x row blocks x 3C).
std::size_t dsum_floats(int B, int T, int NH) {
  return (static_cast<std::size_t>(B) * NH * T + 3) / 4 * 4;
}
std::size_t dout16_floats(int B, int T, int C) {
  return (static_cast<std::size_t>(B) * T * C + 7) / 8 * 4;
}
std::size_t partial_floats(int B, int T, int C) {
  return static_cast<std::size_t>(B) * blocks_of_rows(T) * 3 * C;
}

template <int HS, class H> struct Backward {
  // dout16 (or null): the caller's dout in words, read as they are (the scratch's words unused)
  static void run(cudaStream_t stream, GradOut grad, float* scratch, const float* dout,
                  const std::uint16_t* dout16, const AttentionInput& in, const float* lse, int B,
                  int T, int C, int NH) {
    float* dsum = scratch;
    if (!dout16) {
      auto* rounded = reinterpret_cast<std::uint16_t*>(scratch + dsum_floats(B, T, NH));
      row_sums(stream, dsum, rounded, dout, in, B, T, C, NH);
      dout16 = rounded;
    } else {
      row_sums(stream, dsum, nullptr, dout16, in, B, T, C, NH);
    }
    if (in.qkv16) {
      kernels<std::uint16_t>(stream, grad, dsum, dout16, in.qkv16, lse, T, C, NH, B);
    } else {
      kernels<float>(stream, grad, dsum, dout16, in.qkv, lse, T, C, NH, B);
    }
    DTRAIN_CUDA(cudaGetLastError());
  }
  template <class Dout>
  static void row_sums(cudaStream_t stream, float* dsum, std::uint16_t* rounded,
                       const Dout* dout, const AttentionInput& in, int B, int T, int C, int NH) {
    const std::int64_t rows = static_cast<std::int64_t>(B) * NH * T;
    if (in.out16) {
      flash_dsum_kernel<H, Dout, std::uint16_t><<<blocks_for(rows * 32), kThreads, 0, stream>>>(
          dsum, rounded, dout, in.out16, B, T, C, NH);
    } else {
      flash_dsum_kernel<H, Dout, float><<<blocks_for(rows * 32), kThreads, 0, stream>>>(
          dsum, rounded, dout, in.out, B, T, C, NH);
    }
  }
  template <class In>
  static void kernels(cudaStream_t stream, GradOut grad, const float* dsum,
                      const std::uint16_t* dout16, const In* qkv, const float* lse, int T, int C,
                      int NH, int B) {
    const dim3 grid(blocks_of_rows(T), NH, B);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    flash_backward_dkv_kernel<HS, H, In><<<grid, kBlockThreads, 0, stream>>>(
        grad, dout16, qkv, lse, dsum, T, C, NH, scale);
    flash_backward_dq_kernel<HS, H, In><<<grid, kBlockThreads, 0, stream>>>(
        grad, dout16, qkv, lse, dsum, T, C, NH, scale);
  }
};

// Op<HS, H>::run for the head size and 16-bit format at hand (flash_attention_supports).
template <template <int, class> class Op> auto instance(DType fmt, int hs) {
  const bool bf16 = fmt == DType::bf16;
  switch (hs) {
    case 16: return bf16 ? &Op<16, __nv_bfloat16>::run : &Op<16, __half>::run;
    case 32: return bf16 ? &Op<32, __nv_bfloat16>::run : &Op<32, __half>::run;
    case 48: return bf16 ? &Op<48, __nv_bfloat16>::run : &Op<48, __half>::run;
    case 64: return bf16 ? &Op<64, __nv_bfloat16>::run : &Op<64, __half>::run;
    default: throw Error(Errc::internal, "fused attention has no kernels for head size " +
                                             std::to_string(hs));
  }
}

}  // namespace

bool flash_attention_supports(DType fmt, int C, int NH) {
  if (fmt != DType::bf16 && fmt != DType::f16) return false;
  if (NH <= 0 || C % NH != 0) return false;
  const int hs = C / NH;
  return hs > 0 && hs % 16 == 0 && hs <= 64;
}

std::size_t flash_attention_saved_floats(int B, int T, int NH) {
  return 2 * static_cast<std::size_t>(B) * NH * T;
}

void flash_attention_forward(cudaStream_t stream, DType fmt, float* out, std::uint16_t* out16,
                             float* lse, const float* qkv, const std::uint16_t* qkv16, int B,
                             int T, int C, int NH) {
  check_grid(B, NH);
  instance<Forward>(fmt, C / NH)(stream, out, out16, lse, qkv, qkv16, B, T, C, NH);
}

std::size_t flash_attention_backward_scratch_floats(int B, int T, int C, int NH) {
  return dsum_floats(B, T, NH) + dout16_floats(B, T, C);
}

void flash_attention_backward(cudaStream_t stream, DType fmt, float* dqkv, float* scratch,
                              const float* dout, const std::uint16_t* dout16,
                              const AttentionInput& in, const float* lse, int B, int T, int C,
                              int NH, bool accumulate) {
  check_grid(B, NH);
  GradOut grad;
  grad.dqkv = dqkv;
  grad.accumulate = accumulate;
  instance<Backward>(fmt, C / NH)(stream, grad, scratch, dout, dout16, in, lse, B, T, C, NH);
}

std::size_t flash_attention_backward_rounded_scratch_floats(int B, int T, int C, int NH) {
  return flash_attention_backward_scratch_floats(B, T, C, NH) + partial_floats(B, T, C);
}

void flash_attention_backward_rounded(cudaStream_t stream, DType fmt, std::uint16_t* dqkv16,
                                      float* dbias, float* scratch, const float* dout,
                                      const std::uint16_t* dout16, const AttentionInput& in,
                                      const float* lse, int B, int T, int C, int NH) {
  check_grid(B, NH);
  GradOut grad;
  grad.dqkv16 = dqkv16;
  grad.partials = scratch + flash_attention_backward_scratch_floats(B, T, C, NH);
  instance<Backward>(fmt, C / NH)(stream, grad, scratch, dout, dout16, in, lse, B, T, C, NH);
  const int C3 = 3 * C;
  column_finish_kernel<1><<<(C3 + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      ColumnTargets<1>{{dbias}}, grad.partials, B * blocks_of_rows(T), C3);
  DTRAIN_CUDA(cudaGetLastError());
}

}  // namespace dtrain::cuda
