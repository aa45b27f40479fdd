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

__global__ void gelu_forward_kernel(float* out, const float* inp, std::int64_t n,
                                    std::uint16_t* inp16, std::uint16_t* out16, bool bf16) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float y = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
    if (out) out[i] = y;
    if (inp16) inp16[i] = round_to(x, bf16);
    if (out16) out16[i] = round_to(y, bf16);
  }
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

template <class Input>
__global__ void gelu_backward_kernel(float* dinp, Input inp, const float* dout, std::int64_t n,
                                     bool accumulate) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float th = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float grad =
        0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] = (accumulate ? dinp[i] : 0.0f) + grad * dout[i];
  }
}

}  // namespace

void gelu_forward(cudaStream_t s, float* out, const float* inp, std::int64_t n,
                  std::uint16_t* inp16, std::uint16_t* out16, bool bf16) {
  if (n <= 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n, inp16, out16, bf16);
  check_launch("gelu_forward");
}

void gelu_backward(cudaStream_t s, float* dinp, const float* inp, const float* dout,
                   std::int64_t n, bool accumulate) {
  if (n <= 0) return;
  gelu_backward_kernel<FloatInput><<<blocks_for(n), kThreads, 0, s>>>(dinp, FloatInput{inp},
                                                                      dout, n, accumulate);
  check_launch("gelu_backward");
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
