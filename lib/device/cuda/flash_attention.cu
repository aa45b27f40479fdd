// Fused causal attention on tensor cores for 16-bit GEMM operands (FlashAttention-2's
// scheme): the T x T scores and probabilities live only in shared memory and registers.
// Forward keeps a running row maximum and sum (the online softmax) and saves, per query row,
// the log-sum-exp of its scaled scores; backward recomputes the probabilities from it.
//
// A block has 4 warps and covers 64 rows: warp w owns rows 16w..16w+15, and each of its
// lanes does the row-wise work of one row (lane / 2) over 32 of the 64 columns, every other
// one (column()).
// Q, K, V and dout are rounded to bf16/fp16 where they enter shared memory, as cuBLAS rounds
// the operands of the unfused path; products accumulate in fp32, the softmax is fp32.
//
// Backward runs without atomics, so it is deterministic: one kernel accumulates dK and dV
// per key block over the query blocks at or after it, another dQ per query block over the
// key blocks up to it (the scores are recomputed in both).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "device/half_bits.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 16;                    // WMMA tiles are 16 x 16 x 16
constexpr int kWarps = 4;
constexpr int kRows = kWarps * kTile;        // rows (queries or keys) per block
static_assert(kRows == kFlashAttentionBlockRows, "kernels.hpp tells the block size");
constexpr int kBlockThreads = kWarps * 32;
constexpr int kScoreLd = kRows + 4;          // padded rows: consecutive rows start in
constexpr int kProbLd = kRows + 8;           // different shared-memory banks
constexpr float kLog2e = 1.4426950408889634f;

template <class H> __device__ inline std::uint16_t encode(float f);
template <> __device__ inline std::uint16_t encode<__nv_bfloat16>(float f) {
  return halfbits::to_bf16(f);
}
template <> __device__ inline std::uint16_t encode<__half>(float f) { return halfbits::to_f16(f); }

// Shared memory of every kernel here (44.5 KiB at HS = 64, under the static 48 KiB): two tiles
// of 64 rows x HS in 16 bits, and per warp an fp32 16 x 64 tile (scores, or an output being
// written back) and a 16-bit one (probabilities or their gradients, as a GEMM operand).
template <int HS> struct alignas(32) Shared {
  static constexpr int ld = HS + 8;
  alignas(32) std::uint16_t a[kRows * ld];
  alignas(32) std::uint16_t b[kRows * ld];
  alignas(32) float score[kWarps][kTile * kScoreLd];
  alignas(32) std::uint16_t prob[kWarps][kTile * kProbLd];
  float lse[kRows], dsum[kRows];  // per query column (the dK/dV kernel)
};

// The c-th of the columns that a lane works on in its row: the row's two lanes interleave,
// so a warp reading one c touches 16 shared-memory banks instead of 8.
__device__ inline int column(int c, int half) { return 2 * c + half; }

template <class H> __device__ inline const H* as_half(const std::uint16_t* p) {
  return reinterpret_cast<const H*>(p);
}

// Rows [row0, row0 + 64) of one head's HS columns, `stride` floats apart, rounded into a
// 16-bit tile; rows at or past T become zeros (never garbage that 0 x NaN would spread).
// A thread issues all its loads, four floats each where the rows are 16-byte aligned, before
// its first store: one load in flight at a time left these kernels bound by the loads'
// latency (about 35 TFLOP/s on an H200).
template <int HS, class H>
__device__ void load_rows(std::uint16_t* dst, const float* src, std::int64_t stride, int row0,
                          int T) {
  constexpr int ld = Shared<HS>::ld;
  constexpr int kQuads = HS / 4;  // four-float groups in a row
  constexpr int kPerThread = kRows * kQuads / kBlockThreads;
  static_assert(kRows * kQuads % kBlockThreads == 0, "whole groups per thread");
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % 16 == 0 && stride % 4 == 0;
  float4 v[kPerThread];
  #pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads, r = i / kQuads, c = 4 * (i % kQuads);
    const float* p = src + static_cast<std::int64_t>(row0 + r) * stride + c;
    if (row0 + r >= T) v[j] = float4{0.0f, 0.0f, 0.0f, 0.0f};
    else if (aligned) v[j] = *reinterpret_cast<const float4*>(p);
    else v[j] = float4{p[0], p[1], p[2], p[3]};
  }
  #pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads, r = i / kQuads, c = 4 * (i % kQuads);
    const std::uint32_t lo = encode<H>(v[j].x) | std::uint32_t{encode<H>(v[j].y)} << 16;
    const std::uint32_t hi = encode<H>(v[j].z) | std::uint32_t{encode<H>(v[j].w)} << 16;
    *reinterpret_cast<uint2*>(dst + r * ld + c) = uint2{lo, hi};  // ld and c: 8-byte steps
  }
}

// The same rows from 16-bit words already in the tile's format (a kept copy of qkv): copied
// as they are, four words (8 bytes) at a time where the rows allow. Rounding the fp32 values
// on load gives these very words, so both loads fill the tile alike.
template <int HS, class H>
__device__ void load_rows(std::uint16_t* dst, const std::uint16_t* src, std::int64_t stride,
                          int row0, int T) {
  constexpr int ld = Shared<HS>::ld;
  constexpr int kQuads = HS / 4;
  constexpr int kPerThread = kRows * kQuads / kBlockThreads;
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % 8 == 0 && stride % 4 == 0;
  uint2 v[kPerThread];
  #pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads, r = i / kQuads, c = 4 * (i % kQuads);
    const std::uint16_t* p = src + static_cast<std::int64_t>(row0 + r) * stride + c;
    if (row0 + r >= T) v[j] = uint2{0u, 0u};  // +0 in both formats
    else if (aligned) v[j] = *reinterpret_cast<const uint2*>(p);
    else v[j] = uint2{p[0] | std::uint32_t{p[1]} << 16, p[2] | std::uint32_t{p[3]} << 16};
  }
  #pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads, r = i / kQuads, c = 4 * (i % kQuads);
    *reinterpret_cast<uint2*>(dst + r * ld + c) = v[j];
  }
}

// An element of an fp32 buffer, or of 16-bit words of H, as a float (exact).
template <class H> __device__ inline float value_at(const float* p, std::int64_t i) { return p[i]; }
template <class H> __device__ inline float value_at(const std::uint16_t* p, std::int64_t i) {
  return std::is_same<H, __nv_bfloat16>::value ? halfbits::from_bf16(p[i])
                                               : halfbits::from_f16(p[i]);
}

using Acc = wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float>;
template <class H> using RowA = wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, H, wmma::row_major>;
template <class H> using RowB = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, H, wmma::row_major>;
template <class H> using ColB = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, H, wmma::col_major>;

// This warp's 16 rows of a 64-row tile as HS/16 left operands.
template <int HS, class H>
__device__ void load_row_operands(RowA<H> (&f)[HS / kTile], const std::uint16_t* tile, int warp) {
  constexpr int ld = Shared<HS>::ld;
  #pragma unroll
  for (int k = 0; k < HS / kTile; ++k)
    wmma::load_matrix_sync(f[k], as_half<H>(tile) + warp * kTile * ld + k * kTile, ld);
}

// out (16 x 64 fp32, ld kScoreLd) = x (16 x HS) · tile^T, tile being 64 rows x HS.
template <int HS, class H>
__device__ void times_rows_transposed(float* out, const RowA<H> (&x)[HS / kTile],
                                      const std::uint16_t* tile) {
  constexpr int ld = Shared<HS>::ld;
  #pragma unroll
  for (int n = 0; n < kRows / kTile; ++n) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    #pragma unroll
    for (int k = 0; k < HS / kTile; ++k) {
      ColB<H> t;
      wmma::load_matrix_sync(t, as_half<H>(tile) + n * kTile * ld + k * kTile, ld);
      wmma::mma_sync(acc, x[k], t, acc);
    }
    wmma::store_matrix_sync(out + n * kTile, acc, kScoreLd, wmma::mem_row_major);
  }
}

// acc (16 x HS) += p (16 x 64, 16-bit, ld kProbLd) · tile (64 rows x HS).
template <int HS, class H>
__device__ void accumulate_times_rows(Acc (&acc)[HS / kTile], const std::uint16_t* p,
                                      const std::uint16_t* tile) {
  constexpr int ld = Shared<HS>::ld;
  #pragma unroll
  for (int k = 0; k < kRows / kTile; ++k) {
    RowA<H> a;
    wmma::load_matrix_sync(a, as_half<H>(p) + k * kTile, kProbLd);
    #pragma unroll
    for (int n = 0; n < HS / kTile; ++n) {
      RowB<H> t;
      wmma::load_matrix_sync(t, as_half<H>(tile) + k * kTile * ld + n * kTile, ld);
      wmma::mma_sync(acc[n], a, t, acc[n]);
    }
  }
}

template <int HS> __device__ void zero(Acc (&acc)[HS / kTile]) {
  for (Acc& a : acc) wmma::fill_fragment(a, 0.0f);
}

// Writes acc (16 x HS) into the warp's fp32 tile, so its lanes can read it by row.
template <int HS> __device__ void stage(float* tile, const Acc (&acc)[HS / kTile]) {
  __syncwarp();  // every lane is done reading the tile's previous contents
  #pragma unroll
  for (int n = 0; n < HS / kTile; ++n)
    wmma::store_matrix_sync(tile + n * kTile, acc[n], kScoreLd, wmma::mem_row_major);
  __syncwarp();
}

// dst[row][0..HS) += (or = without accumulate) this warp's staged 16 x HS tile, for the rows
// below T.
template <int HS>
__device__ void add_rows(float* dst, std::int64_t stride, int row0, int T, const float* tile,
                         bool accumulate) {
  const int lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  if (row0 + r >= T) return;
  float* d = dst + static_cast<std::int64_t>(row0 + r) * stride;
  const float* s = tile + r * kScoreLd;
  #pragma unroll
  for (int c = 0; c < HS / 2; ++c)
    d[column(c, half)] = (accumulate ? d[column(c, half)] : 0.0f) + s[column(c, half)];
}

// The saved log-sum-exp (base 2, of the scaled scores) in two floats: the leading part is
// rounded to bf16, so 16-bit saved activations (which round every float) keep about 16
// significant bits of it instead of 8.
__device__ inline void save_lse(float* lse, float value) {
  const float hi = halfbits::round_bf16(value);
  lse[0] = hi;
  lse[1] = value - hi;
}
__device__ inline float load_lse(const float* lse) { return lse[0] + lse[1]; }

template <int HS, class H>
__global__ void __launch_bounds__(kBlockThreads)
    flash_forward_kernel(float* out, float* lse, const float* qkv, int T, int C, int NH,
                         float scale) {
  __shared__ Shared<HS> s;
  // the last query blocks, which walk the most key blocks, start first (a shorter tail)
  const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const float* q = qkv + static_cast<std::int64_t>(b) * T * C3 + h * HS;
  const int q0 = qb * kRows, row0 = q0 + warp * kTile, qi = row0 + r;
  const float scale2 = scale * kLog2e;

  load_rows<HS, H>(s.a, q, C3, q0, T);
  __syncthreads();
  RowA<H> qf[HS / kTile];
  load_row_operands<HS, H>(qf, s.a, warp);
  Acc o[HS / kTile];
  zero<HS>(o);
  float* S = s.score[warp];
  std::uint16_t* P = s.prob[warp];
  float m = -INFINITY, l = 0.0f;  // this row's running maximum (base 2) and sum

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kRows;
    __syncthreads();  // every warp is done with the previous K, V (and with Q in s.a)
    load_rows<HS, H>(s.a, q + C, C3, k0, T);
    load_rows<HS, H>(s.b, q + 2 * C, C3, k0, T);
    __syncthreads();
    times_rows_transposed<HS, H>(S, qf, s.a);
    __syncwarp();
    float x[32], mx = -INFINITY;
    #pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int col = column(c, half);
      x[c] = k0 + col <= qi ? S[r * kScoreLd + col] * scale2 : -INFINITY;
      mx = fmaxf(mx, x[c]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row that sees no key yet
    const float alpha = exp2f(m - base);
    float sum = 0.0f;
    #pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float p = exp2f(x[c] - base);
      sum += p;
      P[r * kProbLd + column(c, half)] = encode<H>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    // rescale the output rows by alpha (through the fp32 tile: a fragment's rows are opaque)
    stage<HS>(S, o);
    #pragma unroll
    for (int c = 0; c < HS / 2; ++c) S[r * kScoreLd + column(c, half)] *= alpha;
    __syncwarp();
    #pragma unroll
    for (int n = 0; n < HS / kTile; ++n)
      wmma::load_matrix_sync(o[n], S + n * kTile, kScoreLd, wmma::mem_row_major);
    accumulate_times_rows<HS, H>(o, P, s.b);
  }

  stage<HS>(S, o);
  if (qi >= T) return;
  const float inv = 1.0f / l;
  float* y = out + (static_cast<std::int64_t>(b) * T + qi) * C + h * HS;
  const float* src = S + r * kScoreLd;
  #pragma unroll
  for (int c = 0; c < HS / 2; ++c) y[column(c, half)] = src[column(c, half)] * inv;
  if (half == 0) save_lse(lse + 2 * ((static_cast<std::int64_t>(b) * NH + h) * T + qi), m + log2f(l));
}

// dsum[b, h, t] = dout[b, t, head h] · out[b, t, head h]: the row sums of P * dP that the
// softmax gradient subtracts. One warp per row. Out: float, or 16-bit words of H.
template <class H, class Out>
__global__ void flash_dsum_kernel(float* dsum, const float* dout, const Out* out, int B, int T,
                                  int C, int NH) {
  const int hs = C / NH, lane = threadIdx.x & 31;
  const std::int64_t rows = static_cast<std::int64_t>(B) * NH * T;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (std::int64_t i = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < rows;
       i += warps) {
    const std::int64_t t = i % T, bh = i / T, h = bh % NH, b = bh / NH;
    const std::int64_t at = (b * T + t) * C + h * hs;
    float v = 0.0f;
    for (int c = lane; c < hs; c += 32) v += dout[at + c] * value_at<H>(out, at + c);
    v = warp_sum(v);
    if (lane == 0) dsum[i] = v;
  }
}

// dK and dV of one key block, over the query blocks at or after it. Rows are keys here, so
// each warp works on S^T (its 16 keys x 64 queries). In (qkv's type): float, or 16-bit words
// of H.
template <int HS, class H, class In>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_dkv_kernel(float* dqkv, const float* dout, const In* qkv, const float* lse,
                              const float* dsum, int T, int C, int NH, float scale,
                              bool accumulate) {
  __shared__ Shared<HS> s;
  const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const std::int64_t head = static_cast<std::int64_t>(b) * T * C3 + h * HS;
  const In* q = qkv + head;
  const float* dy = dout + static_cast<std::int64_t>(b) * T * C + h * HS;
  const std::int64_t stats = (static_cast<std::int64_t>(b) * NH + h) * T;
  const int k0 = kb * kRows, row0 = k0 + warp * kTile, kj = row0 + r;
  const float scale2 = scale * kLog2e;

  load_rows<HS, H>(s.a, q + C, C3, k0, T);
  load_rows<HS, H>(s.b, q + 2 * C, C3, k0, T);
  __syncthreads();
  RowA<H> kf[HS / kTile], vf[HS / kTile];
  load_row_operands<HS, H>(kf, s.a, warp);
  load_row_operands<HS, H>(vf, s.b, warp);
  Acc dk[HS / kTile], dv[HS / kTile];
  zero<HS>(dk);
  zero<HS>(dv);
  float* S = s.score[warp];
  std::uint16_t* P = s.prob[warp];

  for (int qb = kb; qb * kRows < T; ++qb) {
    const int q0 = qb * kRows;
    __syncthreads();  // every warp is done with the previous Q and dout
    load_rows<HS, H>(s.a, q, C3, q0, T);
    load_rows<HS, H>(s.b, dy, C, q0, T);
    if (threadIdx.x < kRows) {
      const int qi = q0 + threadIdx.x;
      s.lse[threadIdx.x] = qi < T ? load_lse(lse + 2 * (stats + qi)) : 0.0f;
      s.dsum[threadIdx.x] = qi < T ? dsum[stats + qi] : 0.0f;
    }
    __syncthreads();
    times_rows_transposed<HS, H>(S, kf, s.a);  // S^T = K Q^T
    __syncwarp();
    float p[32];
    #pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int col = column(c, half), qi = q0 + col;
      p[c] = kj <= qi && qi < T ? exp2f(S[r * kScoreLd + col] * scale2 - s.lse[col]) : 0.0f;
      P[r * kProbLd + col] = encode<H>(p[c]);
    }
    __syncwarp();
    accumulate_times_rows<HS, H>(dv, P, s.b);  // dV += P^T dout
    times_rows_transposed<HS, H>(S, vf, s.b);  // dP^T = V dout^T
    __syncwarp();
    #pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int col = column(c, half);
      P[r * kProbLd + col] = encode<H>(p[c] * (S[r * kScoreLd + col] - s.dsum[col]) * scale);
    }
    __syncwarp();
    accumulate_times_rows<HS, H>(dk, P, s.a);  // dK += dS^T Q
  }

  stage<HS>(S, dk);
  add_rows<HS>(dqkv + head + C, C3, row0, T, S, accumulate);
  stage<HS>(S, dv);
  add_rows<HS>(dqkv + head + 2 * C, C3, row0, T, S, accumulate);
}

// dQ of one query block, over the key blocks up to it.
template <int HS, class H, class In>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_dq_kernel(float* dqkv, const float* dout, const In* qkv, const float* lse,
                             const float* dsum, int T, int C, int NH, float scale,
                             bool accumulate) {
  __shared__ Shared<HS> s;
  // the last query blocks, which walk the most key blocks, start first (a shorter tail)
  const int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
  const std::int64_t C3 = 3 * static_cast<std::int64_t>(C);
  const std::int64_t head = static_cast<std::int64_t>(b) * T * C3 + h * HS;
  const In* q = qkv + head;
  const float* dy = dout + static_cast<std::int64_t>(b) * T * C + h * HS;
  const int q0 = qb * kRows, row0 = q0 + warp * kTile, qi = row0 + r;
  const std::int64_t stat = (static_cast<std::int64_t>(b) * NH + h) * T + qi;
  const float row_lse = qi < T ? load_lse(lse + 2 * stat) : 0.0f;
  const float row_dsum = qi < T ? dsum[stat] : 0.0f;
  const float scale2 = scale * kLog2e;

  load_rows<HS, H>(s.a, q, C3, q0, T);
  load_rows<HS, H>(s.b, dy, C, q0, T);
  __syncthreads();
  RowA<H> qf[HS / kTile], dyf[HS / kTile];
  load_row_operands<HS, H>(qf, s.a, warp);
  load_row_operands<HS, H>(dyf, s.b, warp);
  Acc dq[HS / kTile];
  zero<HS>(dq);
  float* S = s.score[warp];
  std::uint16_t* P = s.prob[warp];

  for (int kb = 0; kb <= qb; ++kb) {
    const int k0 = kb * kRows;
    __syncthreads();  // every warp is done with the previous K, V (and with Q, dout)
    load_rows<HS, H>(s.a, q + C, C3, k0, T);
    load_rows<HS, H>(s.b, q + 2 * C, C3, k0, T);
    __syncthreads();
    times_rows_transposed<HS, H>(S, qf, s.a);  // S = Q K^T
    __syncwarp();
    float p[32];
    #pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int col = column(c, half);
      p[c] = k0 + col <= qi && qi < T ? exp2f(S[r * kScoreLd + col] * scale2 - row_lse) : 0.0f;
    }
    __syncwarp();
    times_rows_transposed<HS, H>(S, dyf, s.b);  // dP = dout V^T
    __syncwarp();
    #pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int col = column(c, half);
      P[r * kProbLd + col] = encode<H>(p[c] * (S[r * kScoreLd + col] - row_dsum) * scale);
    }
    __syncwarp();
    accumulate_times_rows<HS, H>(dq, P, s.a);  // dQ += dS K
  }
  stage<HS>(S, dq);
  add_rows<HS>(dqkv + head, C3, row0, T, S, accumulate);
}

int blocks_of_rows(int T) { return (T + kRows - 1) / kRows; }

template <int HS, class H> struct Forward {
  static void run(cudaStream_t stream, float* out, float* lse, const float* qkv, int B, int T,
                  int C, int NH) {
    const dim3 grid(blocks_of_rows(T), NH, B);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    flash_forward_kernel<HS, H><<<grid, kBlockThreads, 0, stream>>>(out, lse, qkv, T, C, NH, scale);
    DTRAIN_CUDA(cudaGetLastError());
  }
};

template <int HS, class H> struct Backward {
  static void run(cudaStream_t stream, float* dqkv, float* dsum, const float* dout,
                  const AttentionInput& in, const float* lse, int B, int T, int C, int NH,
                  bool accumulate) {
    const std::int64_t rows = static_cast<std::int64_t>(B) * NH * T;
    if (in.out16) {
      flash_dsum_kernel<H, std::uint16_t><<<blocks_for(rows * 32), kThreads, 0, stream>>>(
          dsum, dout, in.out16, B, T, C, NH);
    } else {
      flash_dsum_kernel<H, float><<<blocks_for(rows * 32), kThreads, 0, stream>>>(
          dsum, dout, in.out, B, T, C, NH);
    }
    if (in.qkv16) {
      kernels<std::uint16_t>(stream, dqkv, dsum, dout, in.qkv16, lse, T, C, NH, B, accumulate);
    } else {
      kernels<float>(stream, dqkv, dsum, dout, in.qkv, lse, T, C, NH, B, accumulate);
    }
    DTRAIN_CUDA(cudaGetLastError());
  }
  template <class In>
  static void kernels(cudaStream_t stream, float* dqkv, const float* dsum, const float* dout,
                      const In* qkv, const float* lse, int T, int C, int NH, int B,
                      bool accumulate) {
    const dim3 grid(blocks_of_rows(T), NH, B);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    flash_backward_dkv_kernel<HS, H, In><<<grid, kBlockThreads, 0, stream>>>(
        dqkv, dout, qkv, lse, dsum, T, C, NH, scale, accumulate);
    flash_backward_dq_kernel<HS, H, In><<<grid, kBlockThreads, 0, stream>>>(
        dqkv, dout, qkv, lse, dsum, T, C, NH, scale, accumulate);
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
  return hs > 0 && hs % kTile == 0 && hs <= 64;
}

std::size_t flash_attention_saved_floats(int B, int T, int NH) {
  return 2 * static_cast<std::size_t>(B) * NH * T;
}

void flash_attention_forward(cudaStream_t stream, DType fmt, float* out, float* lse,
                             const float* qkv, int B, int T, int C, int NH) {
  instance<Forward>(fmt, C / NH)(stream, out, lse, qkv, B, T, C, NH);
}

void flash_attention_backward(cudaStream_t stream, DType fmt, float* dqkv, float* dsum,
                              const float* dout, const AttentionInput& in, const float* lse,
                              int B, int T, int C, int NH, bool accumulate) {
  instance<Backward>(fmt, C / NH)(stream, dqkv, dsum, dout, in, lse, B, T, C, NH, accumulate);
}

}  // namespace dtrain::cuda
