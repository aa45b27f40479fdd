// LayerNorm over the last dimension, one block per row. Like the CPU kernel it takes the mean
// first and then the centred variance (no cancellation for rows with a large mean), with
// eps = 1e-5 inside the square root.
#include <cstdint>
#include <initializer_list>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "device/half_bits.hpp"

namespace dtrain::cuda {
namespace {

constexpr float kEps = 1e-5f;  // cpu::kLayerNormEps

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int C,
                                         std::uint16_t* out16, bool bf16) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* x = inp + n * C;
  float* o = out ? out + n * C : nullptr;
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
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float y = (x[c] - m) * r * weight[c] + bias[c];
    if (o) o[c] = y;
    if (out16) out16[n * C + c] = round_to(y, bf16);
  }
  if (threadIdx.x == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

// The output gradient as the block kernels read it: fp32, or bf16 / fp16 words (exact).
struct OutputGradient {
  const float* dout;
  const std::uint16_t* dout16;  // read where dout is null
  bool bf16;
  __device__ float operator[](std::int64_t i) const {
    if (dout) return dout[i];
    return bf16 ? halfbits::from_bf16(dout16[i]) : halfbits::from_f16(dout16[i]);
  }
};

// dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight.
__global__ void layernorm_backward_input_kernel(float* dinp, OutputGradient dout,
                                                const float* inp, const float* weight,
                                                const float* mean, const float* rstd, int C) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* x = inp + n * C;
  auto d = [&](int c) { return dout[n * C + c]; };
  float* dx = dinp + n * C;
  const float m = mean[n], s = rstd[n];
  float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (x[c] - m) * s;
    const float dn = d(c) * weight[c];
    sum_dn += dn;
    sum_dn_xhat += dn * xhat;
  }
  const float a = block_sum(sum_dn, shared) / static_cast<float>(C);
  const float b = block_sum(sum_dn_xhat, shared) / static_cast<float>(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (x[c] - m) * s;
    dx[c] += s * (d(c) * weight[c] - a - xhat * b);
  }
}

// ---- one warp per row, the row in registers --------------------------------------------
// Where a row fits in a warp's registers (C a multiple of 4, at most 32 x 4 x kMaxQuads floats,
// every pointer 16-byte aligned: GPT-2's C = 768 holds 6 four-float groups a lane), a warp
// reads its row once, in four-float loads, and reduces with shuffles alone; a block per row
// read it three times and waited at four block barriers for a row of 3 KB (about 1.75 TB/s
// on an H200 in both directions). The arithmetic is the block kernels', summed in another order.
constexpr int kMaxQuads = 8;
constexpr int kRowsPerBlock = kThreads / 32;

__device__ inline float4 load_quad(const float* row, int i, int quads) {
  return i < quads ? reinterpret_cast<const float4*>(row)[i] : float4{0.0f, 0.0f, 0.0f, 0.0f};
}
// The same four values from bf16 (or fp16) words, one 8-byte load (exact).
__device__ inline float4 load_quad(const std::uint16_t* row, int i, int quads, bool bf16) {
  if (i >= quads) return float4{0.0f, 0.0f, 0.0f, 0.0f};
  const uint2 w = reinterpret_cast<const uint2*>(row)[i];
  auto value = [bf16](std::uint32_t bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    return bf16 ? halfbits::from_bf16(h) : halfbits::from_f16(h);
  };
  return float4{value(w.x & 0xFFFFu), value(w.x >> 16), value(w.y & 0xFFFFu), value(w.y >> 16)};
}

template <int Q>
__global__ void layernorm_forward_rows_kernel(float* out, float* mean, float* rstd,
                                              const float* inp, const float* weight,
                                              const float* bias, int N, int C,
                                              std::uint16_t* out16, bool bf16) {
  const int lane = threadIdx.x & 31, quads = C / 4;
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;  // the whole warp: its row
  const float* x = inp + n * C;
  float4 v[Q];
  float s = 0.0f;
  #pragma unroll
  for (int q = 0; q < Q; ++q) {
    v[q] = load_quad(x, lane + 32 * q, quads);
    s += (v[q].x + v[q].y) + (v[q].z + v[q].w);
  }
  const float m = warp_sum(s) / static_cast<float>(C);
  float var = 0.0f;
  #pragma unroll
  for (int q = 0; q < Q; ++q) {
    if (lane + 32 * q >= quads) continue;
    const float a = v[q].x - m, b = v[q].y - m, c = v[q].z - m, d = v[q].w - m;
    var += (a * a + b * b) + (c * c + d * d);
  }
  const float r = 1.0f / sqrtf(warp_sum(var) / static_cast<float>(C) + kEps);
  float4* o = out ? reinterpret_cast<float4*>(out + n * C) : nullptr;
  #pragma unroll
  for (int q = 0; q < Q; ++q) {
    const int i = lane + 32 * q;
    if (i >= quads) continue;
    const float4 w = reinterpret_cast<const float4*>(weight)[i];
    const float4 b = reinterpret_cast<const float4*>(bias)[i];
    const float4 y{(v[q].x - m) * r * w.x + b.x, (v[q].y - m) * r * w.y + b.y,
                   (v[q].z - m) * r * w.z + b.z, (v[q].w - m) * r * w.w + b.w};
    if (o) o[i] = y;
    if (out16) {
      reinterpret_cast<uint2*>(out16 + n * C)[i] =
          uint2{round_to(y.x, bf16) | std::uint32_t{round_to(y.y, bf16)} << 16,
                round_to(y.z, bf16) | std::uint32_t{round_to(y.w, bf16)} << 16};
    }
  }
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

// The parameter gradients' sums of a block of rows: each warp sums its rows, then the warps'
// sums are added in warp order (fixed, so every run gives the same bits).
constexpr int kBackwardRowsPerBlock = 64;  // 8 a warp

// Backward of a warp's rows, as the block kernel computes each: dinp += rstd * (dnorm -
// mean(dnorm) - xhat * mean(dnorm * xhat)). On the way, the block's sums of the parameter
// gradients (dweight: dout * xhat, dbias: dout) go to partials[k][block][c], which
// column_finish_kernel adds up over the blocks in order: dout and inp are read once, where a
// second pass over both summed them again.
// Two blocks a multiprocessor: at most 128 registers a thread, which GPT-2's rows (C = 768,
// Q = 6) fit without spilling (ptxas, sm_90); without the bound they took 138, one block.
// Wider rows keep 16 Q floats a lane live: at Q = 7 and 8 (C up to 1024) ptxas spills 12 and
// 132 bytes a thread on sm_90, and one block a multiprocessor (Q <= 6 ? 2 : 1) spills none
// with 140 and 168 registers; which is faster is not measured (docs/cuda.md).
// dout16 (or null): dout as bf16 (or fp16) words, read instead.
template <int Q>
__global__ void __launch_bounds__(kThreads, 2)
    layernorm_backward_rows_kernel(float* dinp, float* partials, const float* dout,
                                   const std::uint16_t* dout16, bool bf16, const float* inp,
                                   const float* weight, const float* mean, const float* rstd,
                                   int N, int C, int blocks) {
  __shared__ float4 warp_sums[kRowsPerBlock][32 * Q];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, quads = C / 4;
  float4 sum_w[Q], sum_b[Q];
  #pragma unroll
  for (int q = 0; q < Q; ++q) sum_w[q] = sum_b[q] = float4{0.0f, 0.0f, 0.0f, 0.0f};
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kBackwardRowsPerBlock;
  for (int r = warp; r < kBackwardRowsPerBlock && first + r < N; r += kRowsPerBlock) {
    const std::int64_t n = first + r;
    const float m = mean[n], s = rstd[n];
    float4 xhat[Q], dn[Q];
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
    #pragma unroll
    for (int q = 0; q < Q; ++q) {
      const int i = lane + 32 * q;
      const float4 x = load_quad(inp + n * C, i, quads);
      const float4 d = dout16 ? load_quad(dout16 + n * C, i, quads, bf16)
                              : load_quad(dout + n * C, i, quads);
      const float4 w = load_quad(weight, i, quads);
      xhat[q] = float4{(x.x - m) * s, (x.y - m) * s, (x.z - m) * s, (x.w - m) * s};
      dn[q] = float4{d.x * w.x, d.y * w.y, d.z * w.z, d.w * w.w};
      sum_dn += (dn[q].x + dn[q].y) + (dn[q].z + dn[q].w);
      sum_dn_xhat += (dn[q].x * xhat[q].x + dn[q].y * xhat[q].y) +
                     (dn[q].z * xhat[q].z + dn[q].w * xhat[q].w);
      sum_w[q].x += d.x * xhat[q].x;
      sum_w[q].y += d.y * xhat[q].y;
      sum_w[q].z += d.z * xhat[q].z;
      sum_w[q].w += d.w * xhat[q].w;
      sum_b[q].x += d.x;
      sum_b[q].y += d.y;
      sum_b[q].z += d.z;
      sum_b[q].w += d.w;
    }
    const float a = warp_sum(sum_dn) / static_cast<float>(C);
    const float b = warp_sum(sum_dn_xhat) / static_cast<float>(C);
    float4* dx = reinterpret_cast<float4*>(dinp + n * C);
    #pragma unroll
    for (int q = 0; q < Q; ++q) {
      const int i = lane + 32 * q;
      if (i >= quads) continue;
      float4 g = dx[i];
      g.x += s * (dn[q].x - a - xhat[q].x * b);
      g.y += s * (dn[q].y - a - xhat[q].y * b);
      g.z += s * (dn[q].z - a - xhat[q].z * b);
      g.w += s * (dn[q].w - a - xhat[q].w * b);
      dx[i] = g;
    }
  }
  for (int k = 0; k < 2; ++k) {
    #pragma unroll
    for (int q = 0; q < Q; ++q) warp_sums[warp][lane + 32 * q] = k == 0 ? sum_w[q] : sum_b[q];
    __syncthreads();
    float4* out = reinterpret_cast<float4*>(partials + (static_cast<std::int64_t>(k) * blocks +
                                                        blockIdx.x) * C);
    for (int i = threadIdx.x; i < quads; i += blockDim.x) {
      float4 t = warp_sums[0][i];
      for (int w = 1; w < kRowsPerBlock; ++w) {
        const float4 u = warp_sums[w][i];
        t = float4{t.x + u.x, t.y + u.y, t.z + u.z, t.w + u.w};
      }
      out[i] = t;
    }
    __syncthreads();  // read before the next quantity's sums overwrite them
  }
}

// The four-float groups a lane holds for rows of C floats, or 0 where the row kernels do not
// serve (C or a pointer not in four-float steps, or too long a row).
int quads_per_lane(int C, std::initializer_list<const void*> pointers) {
  if (C % 4 != 0 || C > 32 * 4 * kMaxQuads) return 0;
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return 0;
  }
  return (C / 4 + 31) / 32;
}

// Kernel<Q> for Q = 1..kMaxQuads.
template <template <int> class Kernel> auto rows_kernel(int quads) {
  switch (quads) {
    case 1: return Kernel<1>::get();
    case 2: return Kernel<2>::get();
    case 3: return Kernel<3>::get();
    case 4: return Kernel<4>::get();
    case 5: return Kernel<5>::get();
    case 6: return Kernel<6>::get();
    case 7: return Kernel<7>::get();
    default: return Kernel<8>::get();
  }
}
template <int Q> struct ForwardRows {
  static auto get() { return &layernorm_forward_rows_kernel<Q>; }
};
template <int Q> struct BackwardRows {
  static auto get() { return &layernorm_backward_rows_kernel<Q>; }
};

int row_blocks(int N) { return (N + kRowsPerBlock - 1) / kRowsPerBlock; }

// Per element (n, c): dweight gets dout * xhat, dbias gets dout.
struct ParamGradLoad {
  OutputGradient dout;
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
                       const float* weight, const float* bias, int N, int C,
                       std::uint16_t* out16, bool bf16) {
  if (N <= 0 || C <= 0) return;
  if (const int quads = quads_per_lane(C, {out, inp, weight, bias, out16})) {
    const auto kernel = rows_kernel<ForwardRows>(quads);
    kernel<<<row_blocks(N), kThreads, 0, s>>>(out, mean, rstd, inp, weight, bias, N, C, out16,
                                              bf16);
  } else {
    layernorm_forward_kernel<<<N, kThreads, 0, s>>>(out, mean, rstd, inp, weight, bias, C, out16,
                                                    bf16);
  }
  check_launch("layernorm_forward");
}

int backward_row_blocks(int N) {
  return (N + kBackwardRowsPerBlock - 1) / kBackwardRowsPerBlock;
}

std::size_t layernorm_backward_scratch_floats(int N, int C) {
  // the row kernel's partial sums, more than the column sums' (chunks of 256 rows) need
  return N <= 0 || C <= 0 ? 0 : 2 * static_cast<std::size_t>(backward_row_blocks(N)) * C;
}

void layernorm_backward(cudaStream_t s, float* dinp, float* dweight, float* dbias,
                        const float* dout, const std::uint16_t* dout16, bool bf16,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch) {
  if (N <= 0 || C <= 0) return;
  const ColumnTargets<2> targets{{dweight, dbias}};
  if (const int quads = quads_per_lane(C, {dinp, dout16 ? nullptr : dout, inp, weight, scratch});
      quads && reinterpret_cast<std::uintptr_t>(dout16) % 8 == 0) {
    const int blocks = backward_row_blocks(N);
    const auto kernel = rows_kernel<BackwardRows>(quads);
    kernel<<<blocks, kThreads, 0, s>>>(dinp, scratch, dout, dout16, bf16, inp, weight, mean, rstd,
                                       N, C, blocks);
    check_launch("layernorm_backward");
    column_finish_kernel<2><<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(targets, scratch,
                                                                                blocks, C);
    check_launch("layernorm_backward (parameters)");
    return;
  }
  const OutputGradient dy{dout16 ? nullptr : dout, dout16, bf16};
  layernorm_backward_input_kernel<<<N, kThreads, 0, s>>>(dinp, dy, inp, weight, mean, rstd, C);
  check_launch("layernorm_backward (input)");
  column_sums_accumulate<2>(s, targets, scratch, N, C, ParamGradLoad{dy, inp, mean, rstd, C});
  check_launch("layernorm_backward (parameters)");
}

}  // namespace dtrain::cuda
