// GELU, tanh approximation (as GPT-2 uses), with the constants of the CPU kernel. tanhf is
// the accurate libdevice tanh (the CPU uses a fast tanh with absolute error < 1e-7).
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "device/half_bits.hpp"

namespace dtrain::cuda {
namespace {

constexpr float kSqrt2OverPi = static_cast<float>(0.79788456080286535588);
constexpr float kCubic = static_cast<float>(0.044715);

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
}

__global__ void gelu_forward_kernel(float* out, const float* inp, std::int64_t n,
                                    std::uint16_t* inp16, std::uint16_t* out16, bool bf16) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float y = gelu(x);
    if (out) out[i] = y;
    if (inp16) inp16[i] = round_to(x, bf16);
    if (out16) out16[i] = round_to(y, bf16);
  }
}

__device__ __forceinline__ std::uint16_t gelu_word(std::uint16_t x, bool bf16) {
  return round_to(gelu(bf16 ? halfbits::from_bf16(x) : halfbits::from_f16(x)), bf16);
}

// Words to words: four a thread (one 8-byte load and store, element 0 in the low half as in
// memory) where both pointers allow it, one a thread for the rest.
__global__ void gelu_16bit_x4_kernel(uint2* out, const uint2* inp, std::int64_t n4, bool bf16) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const uint2 v = inp[i];
    auto pair = [bf16](std::uint32_t w) {
      return static_cast<std::uint32_t>(gelu_word(static_cast<std::uint16_t>(w & 0xffffu), bf16)) |
             static_cast<std::uint32_t>(gelu_word(static_cast<std::uint16_t>(w >> 16), bf16)) << 16;
    };
    out[i] = uint2{pair(v.x), pair(v.y)};
  }
}
__global__ void gelu_16bit_kernel(std::uint16_t* out, const std::uint16_t* inp, std::int64_t n,
                                  bool bf16) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = gelu_word(inp[i], bf16);
}

// The input as it is, or decoded from bf16 / fp16 words (exact).
struct FloatInput {
  const float* p;
  __device__ float operator[](std::int64_t i) const { return p[i]; }
};
template <bool Bf16> struct HalfInput {
  const std::uint16_t* p;
  __device__ float operator[](std::int64_t i) const {
    return Bf16 ? halfbits::from_bf16(p[i]) : halfbits::from_f16(p[i]);
  }
};
using Bf16Input = HalfInput<true>;
using F16Input = HalfInput<false>;

__device__ __forceinline__ float gelu_grad(float x) {
  const float th = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
  const float sech2 = 1.0f - th * th;
  const float xs = fminf(fmaxf(x, -10.0f), 10.0f);  // as the CPU's: no 0 * inf past |x| ~ 5e19
  return 0.5f * (1.0f + th) + 0.5f * xs * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * xs * xs);
}

template <class Input>
__global__ void gelu_backward_kernel(float* dinp, Input inp, const float* dout, std::int64_t n,
                                     bool accumulate) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dinp[i] = (accumulate ? dinp[i] : 0.0f) + gelu_grad(inp[i]) * dout[i];
}

// Element (n, c) of GELU's input gradient from the input's words (and dout, fp32 or words),
// written rounded into words as it is handed to the column sums (column_sums_accumulate's
// Load): the gradient, the 16-bit operand of the GEMMs after it and its column sums in one pass.
template <class Input, class Dout> struct GeluGradRoundingLoad {
  Input inp;
  Dout dout;
  std::uint16_t* dinp16;
  int C;
  bool bf16;
  __device__ void operator()(int n, int c, float (&v)[1]) const {
    const std::int64_t i = static_cast<std::int64_t>(n) * C + c;
    v[0] = 0.0f + gelu_grad(inp[i]) * dout[i];  // gelu_backward's value, written over
    dinp16[i] = round_to(v[0], bf16);
  }
};

}  // namespace

void gelu_forward(cudaStream_t s, float* out, const float* inp, std::int64_t n,
                  std::uint16_t* inp16, std::uint16_t* out16, bool bf16) {
  if (n <= 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n, inp16, out16, bf16);
  check_launch("gelu_forward");
}

void gelu_16bit(cudaStream_t s, std::uint16_t* out16, const std::uint16_t* inp16, std::int64_t n,
                bool bf16) {
  if (n <= 0) return;
  const bool aligned = reinterpret_cast<std::uintptr_t>(out16) % 8 == 0 &&
                       reinterpret_cast<std::uintptr_t>(inp16) % 8 == 0;
  const std::int64_t v = aligned ? n / 4 * 4 : 0;
  if (v > 0) {
    gelu_16bit_x4_kernel<<<blocks_for(v / 4), kThreads, 0, s>>>(
        reinterpret_cast<uint2*>(out16), reinterpret_cast<const uint2*>(inp16), v / 4, bf16);
    check_launch("gelu_16bit");
  }
  if (v < n) {
    gelu_16bit_kernel<<<blocks_for(n - v), kThreads, 0, s>>>(out16 + v, inp16 + v, n - v, bf16);
    check_launch("gelu_16bit");
  }
}

void gelu_backward(cudaStream_t s, float* dinp, const float* inp, const float* dout,
                   std::int64_t n, bool accumulate) {
  if (n <= 0) return;
  gelu_backward_kernel<FloatInput><<<blocks_for(n), kThreads, 0, s>>>(dinp, FloatInput{inp},
                                                                      dout, n, accumulate);
  check_launch("gelu_backward");
}

namespace {
template <class Half>
void gelu_backward_rounded_as(cudaStream_t s, std::uint16_t* dinp16, float* dbias,
                              const std::uint16_t* inp16, const float* dout,
                              const std::uint16_t* dout16, int N, int C, bool bf16,
                              float* scratch) {
  const ColumnTargets<1> sums{{dbias}};
  if (dout16) {
    column_sums_accumulate<1>(
        s, sums, scratch, N, C, GeluGradRoundingLoad<Half, Half>{{inp16}, {dout16}, dinp16, C, bf16});
  } else {
    column_sums_accumulate<1>(s, sums, scratch, N, C,
                              GeluGradRoundingLoad<Half, FloatInput>{{inp16}, {dout}, dinp16, C, bf16});
  }
}
}  // namespace

void gelu_backward_rounded(cudaStream_t s, std::uint16_t* dinp16, float* dbias,
                           const std::uint16_t* inp16, const float* dout,
                           const std::uint16_t* dout16, int N, int C, bool bf16, float* scratch) {
  if (N <= 0 || C <= 0) return;
  if (bf16)
    gelu_backward_rounded_as<Bf16Input>(s, dinp16, dbias, inp16, dout, dout16, N, C, bf16, scratch);
  else
    gelu_backward_rounded_as<F16Input>(s, dinp16, dbias, inp16, dout, dout16, N, C, bf16, scratch);
  check_launch("gelu_backward_rounded");
}

void gelu_backward_16bit(cudaStream_t s, float* dinp, const std::uint16_t* inp16, bool bf16,
                         const float* dout, std::int64_t n, bool accumulate) {
  if (n <= 0) return;
  if (bf16) {
    gelu_backward_kernel<Bf16Input><<<blocks_for(n), kThreads, 0, s>>>(dinp, Bf16Input{inp16},
                                                                        dout, n, accumulate);
  } else {
    gelu_backward_kernel<F16Input><<<blocks_for(n), kThreads, 0, s>>>(dinp, F16Input{inp16}, dout,
                                                                      n, accumulate);
  }
  check_launch("gelu_backward_16bit");
}

}  // namespace dtrain::cuda
