#pragma once
// The fused attention's tiles (flash_attention.cu): how a block's 64-row tiles come into
// shared memory, and how a warp multiplies them on registers. A block has 4 warps and covers
// 64 rows; warp w owns rows 16w..16w+15 and keeps them, their accumulators and the 16 x 64
// products with the tile at hand in registers, in the fragments of warp_mma.cuh (lane 4g + t
// holds rows g and g + 8 at columns 8j + 2t and 8j + 2t + 1 of every 8-column tile j).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "device/cuda/async_copy.cuh"
#include "device/cuda/kernels.hpp"
#include "device/cuda/warp_mma.cuh"
#include "device/half_bits.hpp"

namespace dtrain::cuda::flash {

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;                // rows of a warp: an mma's A operand
constexpr int kRows = kWarps * kWarpRows;    // rows (queries or keys) per block
static_assert(kRows == kFlashAttentionBlockRows, "kernels.hpp tells the block size");
constexpr int kBlockThreads = kWarps * 32;
constexpr int kColumnTiles = kRows / 8;      // 8-column tiles of a warp's 16 x 64 scores

// Shared memory of every kernel here (37 KiB at HS = 64): two buffers, each of two tiles of
// 64 rows x HS in 16 bits (K and V, or Q and dout), one being read while the next block's
// load into the other; rows padded by 16 bytes so the 8 rows an ldmatrix reads sit in
// different banks.
template <int HS> struct Shared {
  static constexpr int ld = HS + 8;
  alignas(16) std::uint16_t a[2][kRows * ld];
  alignas(16) std::uint16_t b[2][kRows * ld];
  float lse[2][kRows], dsum[2][kRows];  // per query column (the dK/dV kernel)
};

// A warp's registers: Rows<HS> are its 16 rows of a 64 x HS tile as left operands (HS / 16
// of them, one per 16 columns); Scores its 16 x 64 products with a tile (kColumnTiles
// accumulators); Acc<HS> its 16 x HS accumulators.
template <int HS> using Rows = std::uint32_t[HS / 16][4];
using Scores = float[kColumnTiles][4];
template <int HS> using Acc = float[HS / 8][4];
using Operands = std::uint32_t[kRows / 16][4];  // 16 x 64 values as left operands

// Four consecutive elements of a row as a tile holds them, four 16-bit words of H: fp32
// values rounded by the GPU's conversion instruction, two at a time (pack: the same bits as
// device/half_bits.hpp's), or words already in the tile's format (a kept copy of qkv), which
// rounding the fp32 values would have given. One 16- or 8-byte load where `aligned`.
template <class H> __device__ inline uint2 four_words(const float* p, bool aligned) {
  const float4 v = aligned ? *reinterpret_cast<const float4*>(p) : float4{p[0], p[1], p[2], p[3]};
  return uint2{pack<H>(v.x, v.y), pack<H>(v.z, v.w)};
}
template <class H> __device__ inline uint2 four_words(const std::uint16_t* p, bool aligned) {
  return aligned ? *reinterpret_cast<const uint2*>(p)
                 : uint2{p[0] | std::uint32_t{p[1]} << 16, p[2] | std::uint32_t{p[3]} << 16};
}

// Rows [row0, row0 + 64) of one head's HS columns, `stride` elements apart (fp32, or 16-bit
// words of H), into a 16-bit tile; rows at or past T become zeros (never garbage that 0 x NaN
// would spread). A thread issues all its loads before its first store: one load in flight at
// a time left these kernels bound by the loads' latency (about 35 TFLOP/s on an H200).
template <int HS, class H, class In>
__device__ void load_rows(std::uint16_t* dst, const In* src, std::int64_t stride, int row0,
                          int T) {
  constexpr int ld = Shared<HS>::ld;
  constexpr int kQuads = HS / 4;  // four-element groups in a row
  constexpr int kPerThread = kRows * kQuads / kBlockThreads;
  static_assert(kRows * kQuads % kBlockThreads == 0, "whole groups per thread");
  const bool aligned =
      reinterpret_cast<std::uintptr_t>(src) % (4 * sizeof(In)) == 0 && stride % 4 == 0;
  uint2 v[kPerThread];
  #pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads, r = i / kQuads, c = 4 * (i % kQuads);
    const In* p = src + static_cast<std::int64_t>(row0 + r) * stride + c;
    v[j] = row0 + r < T ? four_words<H>(p, aligned) : uint2{0u, 0u};  // +0 in both formats
  }
  #pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads, r = i / kQuads, c = 4 * (i % kQuads);
    *reinterpret_cast<uint2*>(dst + r * ld + c) = v[j];  // ld and c: 8-byte steps
  }
}

// load_rows started: from 16-bit words on 16-byte aligned rows, copies that do not wait (the
// caller commits and waits for them); rows at or past T become zeros. Otherwise load_rows.
template <int HS, class H>
__device__ void start_rows(std::uint16_t* dst, const std::uint16_t* src, std::int64_t stride,
                           int row0, int T) {
  if (reinterpret_cast<std::uintptr_t>(src) % 16 != 0 || stride % 8 != 0) {
    load_rows<HS, H>(dst, src, stride, row0, T);
    return;
  }
  constexpr int ld = Shared<HS>::ld;
  constexpr int kPieces = HS / 8;  // 16-byte pieces in a row
  constexpr int kPerThread = kRows * kPieces / kBlockThreads;
  static_assert(kRows * kPieces % kBlockThreads == 0, "whole pieces per thread");
  #pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kBlockThreads, r = i / kPieces, c = 8 * (i % kPieces);
    const bool inside = row0 + r < T;  // row0 itself always is
    const std::uint16_t* p = src + static_cast<std::int64_t>(inside ? row0 + r : row0) * stride + c;
    copy_16_bytes_async(dst + r * ld + c, p, inside);
  }
}
template <int HS, class H>
__device__ void start_rows(std::uint16_t* dst, const float* src, std::int64_t stride, int row0,
                           int T) {
  load_rows<HS, H>(dst, src, stride, row0, T);  // rounded through registers
}

// An element of an fp32 buffer, or of 16-bit words of H, as a float (exact).
template <class H> __device__ inline float value_at(const float* p, std::int64_t i) { return p[i]; }
template <class H> __device__ inline float value_at(const std::uint16_t* p, std::int64_t i) {
  return std::is_same<H, __nv_bfloat16>::value ? halfbits::from_bf16(p[i])
                                               : halfbits::from_f16(p[i]);
}

__device__ inline int lane_id() { return threadIdx.x & 31; }

// This warp's 16 rows of a 64-row tile as left operands: ldmatrix's four 8 x 8 matrices are
// rows 0-7 and 8-15 at columns k..k+7, then the same rows at k+8..k+15.
template <int HS> __device__ void load_rows_as_operands(Rows<HS>& f, const std::uint16_t* tile, int warp) {
  constexpr int ld = Shared<HS>::ld;
  const int lane = lane_id();
  const std::uint16_t* row = tile + (warp * kWarpRows + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4);
  #pragma unroll
  for (int k = 0; k < HS / 16; ++k) load_matrices(f[k], row + 16 * k);
}

// The 16-column groups of a block's 16 x 64 products that a warp needs: [first, last). On
// the diagonal a warp's causal mask covers whole groups (keys after all its queries), which
// it skips: their probabilities are exact zeros, so the results are the same.
struct Groups {
  int first = 0, last = kRows / 16;
};
// Forward and dQ (rows are queries): keys up to the warp's last row.
__device__ inline Groups keys_seen(bool diagonal, int warp) {
  return diagonal ? Groups{0, warp + 1} : Groups{};
}
// dK/dV (rows are keys): queries from the warp's first row on.
__device__ inline Groups queries_seeing(bool diagonal, int warp) {
  return diagonal ? Groups{warp, kRows / 16} : Groups{};
}

// s (16 x 64) = x (16 x HS) · tile^T, tile being 64 rows x HS, in the column groups `g` (the
// others zero): tile's rows are the right operand's columns, so one ldmatrix gives two
// 8-column tiles' operands (rows 0-7 then 8-15 of a 16-row group, each at columns k..k+7 and
// k+8..k+15).
template <int HS, class H>
__device__ void times_rows_transposed(Scores& s, const Rows<HS>& x, const std::uint16_t* tile,
                                      Groups g) {
  constexpr int ld = Shared<HS>::ld;
  const int lane = lane_id();
  const std::uint16_t* row = tile + ((lane & 7) + 8 * (lane >> 4)) * ld + 8 * ((lane >> 3) & 1);
  #pragma unroll
  for (int j = 0; j < kColumnTiles; j += 2) {
    #pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = s[j + 1][e] = 0.0f;
    if (j / 2 < g.first || j / 2 >= g.last) continue;  // the same for the whole warp
    #pragma unroll
    for (int k = 0; k < HS / 16; ++k) {
      std::uint32_t b[4];
      load_matrices(b, row + 8 * j * ld + 16 * k);
      mma<H>(s[j], x[k], b[0], b[1]);
      mma<H>(s[j + 1], x[k], b[2], b[3]);
    }
  }
}

// acc (16 x HS) += p (16 x 64, left operands) · tile (64 rows x HS), over p's column groups
// `g`: the tile's rows are the right operand's rows, so ldmatrix transposes (rows k..k+7 and
// k+8..k+15 at columns n..n+7, then the same rows at n+8..n+15).
template <int HS, class H>
__device__ void accumulate_times_rows(Acc<HS>& acc, const Operands& p, const std::uint16_t* tile,
                                      Groups g) {
  constexpr int ld = Shared<HS>::ld;
  const int lane = lane_id();
  const std::uint16_t* row = tile + ((lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 8 * (lane >> 4);
  #pragma unroll
  for (int k = 0; k < kRows / 16; ++k) {
    if (k < g.first || k >= g.last) continue;
    #pragma unroll
    for (int n = 0; n < HS / 8; n += 2) {
      std::uint32_t b[4];
      load_matrices_transposed(b, row + 16 * k * ld + 8 * n);
      mma<H>(acc[n], p[k], b[0], b[1]);
      mma<H>(acc[n + 1], p[k], b[2], b[3]);
    }
  }
}

// 16 x 64 fp32 values, rounded, as left operands: 8-column tiles 2k and 2k + 1 make the
// operand of columns 16k..16k+15.
template <class H> __device__ void to_operands(Operands& a, const Scores& s) {
  #pragma unroll
  for (int k = 0; k < kRows / 16; ++k) {
    a[k][0] = pack<H>(s[2 * k][0], s[2 * k][1]);
    a[k][1] = pack<H>(s[2 * k][2], s[2 * k][3]);
    a[k][2] = pack<H>(s[2 * k + 1][0], s[2 * k + 1][1]);
    a[k][3] = pack<H>(s[2 * k + 1][2], s[2 * k + 1][3]);
  }
}

template <int HS> __device__ void zero(Acc<HS>& acc) {
  #pragma unroll
  for (int n = 0; n < HS / 8; ++n)
    #pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
}

// The row of 4-lane group g that element e of an accumulator lies in: g, or g + 8 (e >= 2).
__device__ inline int row_of(int e) { return (lane_id() >> 2) + 8 * (e >> 1); }
// Its column within an 8-column tile.
__device__ inline int column_of(int e) { return 2 * (lane_id() & 3) + (e & 1); }

// The sum, or the maximum, over the 4 lanes that hold a row.
__device__ inline float row_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ inline float row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// dst[row][0..HS) += (or = without accumulate) acc's rows, row0 + 0..15, for the rows below T.
template <int HS>
__device__ void write_rows(float* dst, std::int64_t stride, int row0, int T, const Acc<HS>& acc,
                           bool accumulate) {
  #pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int row = row0 + row_of(e);
    if (row >= T) continue;
    float* d = dst + static_cast<std::int64_t>(row) * stride + column_of(e);
    #pragma unroll
    for (int n = 0; n < HS / 8; ++n) d[8 * n] = (accumulate ? d[8 * n] : 0.0f) + acc[n][e];
  }
}

// The same rows rounded to H, into 16-bit words: a lane's two adjacent columns in one pack.
template <int HS, class H>
__device__ void write_rows_16bit(std::uint16_t* dst, std::int64_t stride, int row0, int T,
                                 const Acc<HS>& acc) {
  #pragma unroll
  for (int e = 0; e < 4; e += 2) {
    const int row = row0 + row_of(e);
    if (row >= T) continue;
    std::uint16_t* d = dst + static_cast<std::int64_t>(row) * stride + column_of(e);
    #pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      const std::uint32_t two = pack<H>(acc[n][e], acc[n][e + 1]);
      d[8 * n] = static_cast<std::uint16_t>(two & 0xFFFFu);
      d[8 * n + 1] = static_cast<std::uint16_t>(two >> 16);
    }
  }
}

}  // namespace dtrain::cuda::flash
