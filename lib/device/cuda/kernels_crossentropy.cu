// Softmax cross-entropy over the vocabulary, one block per row of logits, for the whole
// vocabulary and for one vocabulary-parallel shard. Only the first V columns are read;
// padding columns get a zero gradient, so whatever they hold cannot change the loss. The
// whole vocabulary's logits may also be bf16 / fp16 words (an LM head whose GEMM rounds its
// result): the same kernels, reading words.
#include <cstdint>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "device/half_bits.hpp"

namespace dtrain::cuda {
namespace {

__device__ inline bool owns(std::int32_t target, int vocab_start, int V) {
  const std::int64_t j = static_cast<std::int64_t>(target) - vocab_start;
  return j >= 0 && j < V;
}

// A running maximum m and sum s of exp(z - m) (the online softmax's pair): one pass over a
// row instead of a pass for the maximum and another for the sum. A row of GPT-2's vocabulary
// is 200 KB; the second pass over 16k rows did not come from cache (1.2 TB/s on an H200).
struct MaxSumExp {
  float m = -INFINITY, s = 0.0f;

  __device__ void add(float z) {
    if (z > m) {  // a new maximum rescales what was summed (nothing at the start)
      s = s * expf(m - z) + 1.0f;
      m = z;
    } else if (z != -INFINITY) {  // (-inf first: exp(-inf - -inf) would be NaN; it adds 0)
      s += expf(z - m);  // NaN stays NaN, as it must for a diverged run
    }
  }
  __device__ void merge(float om, float os) {
    const float mx = fmaxf(m, om);
    if (mx == -INFINITY) return;  // both empty
    s = s * expf(m - mx) + os * expf(om - mx);
    m = mx;
  }
};

__device__ inline MaxSumExp warp_max_sumexp(MaxSumExp v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v.merge(__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset));
  }
  return v;
}

// A row of logits as the kernels read it: fp32 as stored, or bf16 / fp16 words widened
// (exactly). four(q, f) hands f the elements 4q .. 4q+3 from one load (16 or 8 bytes), where
// the row is aligned for it (aligned()).
struct FloatRow {
  using Word = float;
  const float* z;
  __device__ float operator[](std::int64_t j) const { return z[j]; }
  __device__ bool aligned() const { return reinterpret_cast<std::uintptr_t>(z) % 16 == 0; }
  template <class F> __device__ void four(int q, F f) const {
    const float4 x = reinterpret_cast<const float4*>(z)[q];
    f(x.x);
    f(x.y);
    f(x.z);
    f(x.w);
  }
};
template <bool Bf16> struct HalfRow {
  using Word = std::uint16_t;
  const std::uint16_t* z;
  __device__ static float widen(std::uint32_t w) {
    const auto h = static_cast<std::uint16_t>(w & 0xffffu);
    return Bf16 ? halfbits::from_bf16(h) : halfbits::from_f16(h);
  }
  __device__ float operator[](std::int64_t j) const { return widen(z[j]); }
  __device__ bool aligned() const { return reinterpret_cast<std::uintptr_t>(z) % 8 == 0; }
  template <class F> __device__ void four(int q, F f) const {
    const uint2 x = reinterpret_cast<const uint2*>(z)[q];
    f(widen(x.x));
    f(widen(x.x >> 16));
    f(widen(x.y));
    f(widen(x.y >> 16));
  }
};
using Bf16Row = HalfRow<true>;
using F16Row = HalfRow<false>;

// max and sum of exp(z - max) over z[0..V) in one read, four at a time where the row is
// aligned for it; thread 0 gets the result (blockDim.x a multiple of 32).
template <class Row>
__device__ inline MaxSumExp row_max_sumexp(Row z, int V, float* shared_m, float* shared_s) {
  MaxSumExp v;
  int j0 = 0;
  if (z.aligned()) {
    for (int q = threadIdx.x; q < V / 4; q += blockDim.x) z.four(q, [&v](float x) { v.add(x); });
    j0 = V / 4 * 4;
  }
  for (int j = j0 + threadIdx.x; j < V; j += blockDim.x) v.add(z[j]);
  v = warp_max_sumexp(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    shared_m[warp] = v.m;
    shared_s[warp] = v.s;
  }
  __syncthreads();
  if (warp == 0) {
    MaxSumExp w;
    if (lane < static_cast<int>(blockDim.x >> 5)) {
      w.m = shared_m[lane];
      w.s = shared_s[lane];
    }
    v = warp_max_sumexp(w);
  }
  return v;
}

template <class Row>
__global__ void crossentropy_forward_kernel(float* losses, float* lse,
                                            const typename Row::Word* logits,
                                            const std::int32_t* targets, int V, int Vp) {
  __shared__ float shared_m[32];
  __shared__ float shared_s[32];
  const std::int64_t n = blockIdx.x;
  const Row z{logits + n * Vp};
  const MaxSumExp row = row_max_sumexp(z, V, shared_m, shared_s);
  if (threadIdx.x == 0) {
    lse[n] = row.m + logf(row.s);
    losses[n] = (row.m - z[targets[n]]) + logf(row.s);  // as the CPU's: no log(sum) lost at large logits
  }
}

// How the backward kernel stores a gradient: as it is, or rounded to bf16 / fp16 (what
// staging it as a GEMM operand would give, bit for bit).
// four(dz, q, g) stores g[0..4) at 4q .. 4q+3 in one store (16 or 8 bytes) where aligned(dz).
struct StoreFloat {
  __device__ void operator()(float* dz, int j, float g) const { dz[j] = g; }
  __device__ static bool aligned(const float* dz) {
    return reinterpret_cast<std::uintptr_t>(dz) % 16 == 0;
  }
  __device__ void four(float* dz, int q, const float (&g)[4]) const {
    reinterpret_cast<float4*>(dz)[q] = float4{g[0], g[1], g[2], g[3]};
  }
};
template <bool Bf16> struct StoreHalf {
  __device__ static std::uint32_t word(float g) {
    return Bf16 ? halfbits::to_bf16(g) : halfbits::to_f16(g);
  }
  __device__ void operator()(std::uint16_t* dz, int j, float g) const {
    dz[j] = static_cast<std::uint16_t>(word(g));
  }
  __device__ static bool aligned(const std::uint16_t* dz) {
    return reinterpret_cast<std::uintptr_t>(dz) % 8 == 0;
  }
  __device__ void four(std::uint16_t* dz, int q, const float (&g)[4]) const {
    reinterpret_cast<uint2*>(dz)[q] = uint2{word(g[0]) | word(g[1]) << 16,
                                            word(g[2]) | word(g[3]) << 16};
  }
};
using StoreBf16 = StoreHalf<true>;
using StoreF16 = StoreHalf<false>;

// dz[j] = exp(z[j] - lse) * d, minus d at the target (owned by this shard); padding 0.
// Each element is read and written by the same thread, so dlogits may alias logits where
// both are of one type. Four elements a thread (one load, one store) where both rows are
// aligned for it: a padding column's logit is then loaded but not used.
template <class Row, class Out, class Store>
__global__ void crossentropy_backward_kernel(Out* dlogits, const typename Row::Word* logits,
                                             const float* lse, const std::int32_t* targets,
                                             const float* dlosses, int V, int ld,
                                             int vocab_start, Store store) {
  const std::int64_t n = blockIdx.x;
  const Row z{logits + n * ld};
  Out* dz = dlogits + n * ld;
  const float l = lse[n], d = dlosses[n];
  const std::int32_t target = targets[n];
  const int own = owns(target, vocab_start, V) ? target - vocab_start : -1;
  auto grad = [&](int j, float logit) {
    float g = 0.0f;
    if (j < V) {
      g = expf(logit - l) * d;
      if (j == own) g -= d;
    }
    return g;
  };
  int j0 = 0;
  if (z.aligned() && Store::aligned(dz)) {
    for (int q = threadIdx.x; q < ld / 4; q += blockDim.x) {
      float g[4];
      int k = 0;
      z.four(q, [&](float logit) {
        g[k] = grad(4 * q + k, logit);
        ++k;
      });
      store.four(dz, q, g);
    }
    j0 = ld / 4 * 4;
  }
  for (int j = j0 + threadIdx.x; j < ld; j += blockDim.x) store(dz, j, grad(j, j < V ? z[j] : 0.0f));
}

__global__ void shard_stats_kernel(float* max, float* target_logit, const float* logits,
                                   const std::int32_t* targets, int V, int ld, int vocab_start) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* z = logits + n * ld;
  float m = -INFINITY;  // an empty shard must not win the max
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, z[j]);
  m = block_max(m, shared);
  if (threadIdx.x == 0) {
    max[n] = m;
    // 0 on the shards that do not own the target, so a sum over shards picks the owner's
    const std::int32_t t = targets[n];
    target_logit[n] = owns(t, vocab_start, V) ? z[t - vocab_start] : 0.0f;
  }
}

__global__ void shard_sumexp_kernel(float* sumexp, const float* logits, const float* max, int V,
                                    int ld) {
  __shared__ float shared[32];
  const std::int64_t n = blockIdx.x;
  const float* z = logits + n * ld;
  const float mx = max[n];
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(z[j] - mx);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) sumexp[n] = s;
}

__global__ void shard_finish_kernel(float* losses, float* lse, const float* max,
                                    const float* sumexp, const float* target_logit, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  lse[n] = max[n] + logf(sumexp[n]);
  losses[n] = (max[n] - target_logit[n]) + logf(sumexp[n]);  // as the fused kernel's
}

}  // namespace

void crossentropy_forward(cudaStream_t s, float* losses, float* lse, const float* logits,
                          const std::int32_t* targets, int N, int V, int Vp) {
  if (N <= 0) return;
  crossentropy_forward_kernel<FloatRow><<<N, kThreads, 0, s>>>(losses, lse, logits, targets, V,
                                                               Vp);
  check_launch("crossentropy_forward");
}

void crossentropy_forward_16bit(cudaStream_t s, float* losses, float* lse,
                                const std::uint16_t* logits16, bool bf16,
                                const std::int32_t* targets, int N, int V, int Vp) {
  if (N <= 0) return;
  if (bf16) {
    crossentropy_forward_kernel<Bf16Row><<<N, kThreads, 0, s>>>(losses, lse, logits16, targets,
                                                                V, Vp);
  } else {
    crossentropy_forward_kernel<F16Row><<<N, kThreads, 0, s>>>(losses, lse, logits16, targets,
                                                               V, Vp);
  }
  check_launch("crossentropy_forward_16bit");
}

void crossentropy_backward(cudaStream_t s, float* dlogits, const float* logits, const float* lse,
                           const std::int32_t* targets, const float* dlosses, int N, int V,
                           int Vp) {
  if (N <= 0) return;
  crossentropy_backward_kernel<FloatRow, float, StoreFloat><<<N, kThreads, 0, s>>>(
      dlogits, logits, lse, targets, dlosses, V, Vp, 0, StoreFloat{});
  check_launch("crossentropy_backward");
}

void crossentropy_shard_stats(cudaStream_t s, float* max, float* target_logit,
                              const float* logits, const std::int32_t* targets, int N, int V,
                              int ld, int vocab_start) {
  if (N <= 0) return;
  shard_stats_kernel<<<N, kThreads, 0, s>>>(max, target_logit, logits, targets, V, ld,
                                            vocab_start);
  check_launch("crossentropy_shard_stats");
}

void crossentropy_shard_sumexp(cudaStream_t s, float* sumexp, const float* logits,
                               const float* max, int N, int V, int ld) {
  if (N <= 0) return;
  shard_sumexp_kernel<<<N, kThreads, 0, s>>>(sumexp, logits, max, V, ld);
  check_launch("crossentropy_shard_sumexp");
}

void crossentropy_shard_finish(cudaStream_t s, float* losses, float* lse, const float* max,
                               const float* sumexp, const float* target_logit, int N) {
  if (N <= 0) return;
  shard_finish_kernel<<<(N + kThreads - 1) / kThreads, kThreads, 0, s>>>(losses, lse, max,
                                                                         sumexp, target_logit, N);
  check_launch("crossentropy_shard_finish");
}

void crossentropy_shard_backward(cudaStream_t s, float* dlogits, const float* logits,
                                 const float* lse, const std::int32_t* targets,
                                 const float* dlosses, int N, int V, int ld, int vocab_start) {
  if (N <= 0) return;
  crossentropy_backward_kernel<FloatRow, float, StoreFloat><<<N, kThreads, 0, s>>>(
      dlogits, logits, lse, targets, dlosses, V, ld, vocab_start, StoreFloat{});
  check_launch("crossentropy_shard_backward");
}

void crossentropy_backward_16bit(cudaStream_t s, std::uint16_t* dlogits16, bool bf16,
                                 const float* logits, const std::uint16_t* logits16,
                                 const float* lse, const std::int32_t* targets,
                                 const float* dlosses, int N, int V, int ld, int vocab_start) {
  if (N <= 0) return;
  using U = std::uint16_t;
  if (!logits16) {  // 16-bit words over the fp32 logits they come from: not in place
    const std::size_t rows = static_cast<std::size_t>(N) * static_cast<std::size_t>(ld);
    require_apart(dlogits16, rows * sizeof(U), logits, rows * sizeof(float), "crossentropy_backward_16bit");
  }
  if (bf16 && logits16) {
    crossentropy_backward_kernel<Bf16Row, U, StoreBf16><<<N, kThreads, 0, s>>>(
        dlogits16, logits16, lse, targets, dlosses, V, ld, vocab_start, StoreBf16{});
  } else if (logits16) {
    crossentropy_backward_kernel<F16Row, U, StoreF16><<<N, kThreads, 0, s>>>(
        dlogits16, logits16, lse, targets, dlosses, V, ld, vocab_start, StoreF16{});
  } else if (bf16) {
    crossentropy_backward_kernel<FloatRow, U, StoreBf16><<<N, kThreads, 0, s>>>(
        dlogits16, logits, lse, targets, dlosses, V, ld, vocab_start, StoreBf16{});
  } else {
    crossentropy_backward_kernel<FloatRow, U, StoreF16><<<N, kThreads, 0, s>>>(
        dlogits16, logits, lse, targets, dlosses, V, ld, vocab_start, StoreF16{});
  }
  check_launch("crossentropy_backward_16bit");
}

}  // namespace dtrain::cuda
