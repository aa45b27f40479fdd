// fp32 <-> bf16/f16 conversions, rounding to a 16-bit format in fp32, and the non-finite
// flag of loss scaling. The rounding is device/half_bits.hpp, the same bit arithmetic as the
// CPU loops, so both devices give identical bits.
#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernel_utils.cuh"
#include "device/cuda/kernels.hpp"
#include "device/half_bits.hpp"

namespace dtrain::cuda {
namespace {

#define DTRAIN_GRID_STRIDE(i, n)                                                              \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (n); i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void to_16bit_kernel(std::uint16_t* dst, const float* src, std::int64_t n, bool bf16) {
  DTRAIN_GRID_STRIDE(i, n) dst[i] = bf16 ? halfbits::to_bf16(src[i]) : halfbits::to_f16(src[i]);
}

__global__ void from_16bit_kernel(float* dst, const std::uint16_t* src, std::int64_t n,
                                  bool bf16) {
  DTRAIN_GRID_STRIDE(i, n) dst[i] = bf16 ? halfbits::from_bf16(src[i]) : halfbits::from_f16(src[i]);
}

// Four elements a thread, in one 16-byte load and one 8-byte store (element 0 in the low
// half, as in memory): these passes move bytes and nothing else.
__device__ __forceinline__ std::uint32_t pack_16bit(float lo, float hi, bool bf16) {
  const std::uint32_t l = bf16 ? halfbits::to_bf16(lo) : halfbits::to_f16(lo);
  const std::uint32_t h = bf16 ? halfbits::to_bf16(hi) : halfbits::to_f16(hi);
  return l | h << 16;
}
__device__ __forceinline__ float low_16bit(std::uint32_t v, bool bf16) {
  const auto h = static_cast<std::uint16_t>(v & 0xffffu);
  return bf16 ? halfbits::from_bf16(h) : halfbits::from_f16(h);
}

__global__ void to_16bit_x4_kernel(uint2* dst, const float4* src, std::int64_t n4, bool bf16) {
  DTRAIN_GRID_STRIDE(i, n4) {
    const float4 v = src[i];
    dst[i] = uint2{pack_16bit(v.x, v.y, bf16), pack_16bit(v.z, v.w, bf16)};
  }
}

__global__ void from_16bit_x4_kernel(float4* dst, const uint2* src, std::int64_t n4, bool bf16) {
  DTRAIN_GRID_STRIDE(i, n4) {
    const uint2 v = src[i];
    dst[i] = float4{low_16bit(v.x, bf16), low_16bit(v.x >> 16, bf16), low_16bit(v.y, bf16),
                    low_16bit(v.y >> 16, bf16)};
  }
}

__global__ void round_kernel(float* dst, const float* src, std::int64_t n, bool bf16) {
  DTRAIN_GRID_STRIDE(i, n) dst[i] = bf16 ? halfbits::round_bf16(src[i]) : halfbits::round_f16(src[i]);
}

// *flag = 1 when any element is inf or NaN (every writer stores the same value).
__global__ void nonfinite_kernel(int* flag, const float* x, std::int64_t n) {
  bool found = false;
  DTRAIN_GRID_STRIDE(i, n) found = found || halfbits::is_nonfinite(x[i]);
  if (__syncthreads_or(found) && threadIdx.x == 0) *flag = 1;
}

#undef DTRAIN_GRID_STRIDE

// Elements of n the four-at-a-time kernels can take: all but the last n % 4, where both
// pointers are aligned for them; else none.
std::int64_t vector_part(const void* floats, const void* halves, std::int64_t n) {
  const bool aligned = reinterpret_cast<std::uintptr_t>(floats) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(halves) % 8 == 0;
  return aligned ? n / 4 * 4 : 0;
}

}  // namespace

void convert_to_16bit(cudaStream_t s, std::uint16_t* dst, const float* src, std::int64_t n,
                      bool bf16) {
  if (n <= 0) return;
  const auto count = static_cast<std::size_t>(n);
  require_apart(dst, count * sizeof *dst, src, count * sizeof *src, "convert_to_16bit");
  const std::int64_t v = vector_part(src, dst, n);
  if (v > 0) {
    to_16bit_x4_kernel<<<blocks_for(v / 4), kThreads, 0, s>>>(
        reinterpret_cast<uint2*>(dst), reinterpret_cast<const float4*>(src), v / 4, bf16);
    check_launch("convert_to_16bit");
  }
  if (v < n) {
    to_16bit_kernel<<<blocks_for(n - v), kThreads, 0, s>>>(dst + v, src + v, n - v, bf16);
    check_launch("convert_to_16bit");
  }
}

void convert_from_16bit(cudaStream_t s, float* dst, const std::uint16_t* src, std::int64_t n,
                        bool bf16) {
  if (n <= 0) return;
  const auto count = static_cast<std::size_t>(n);
  require_apart(dst, count * sizeof *dst, src, count * sizeof *src, "convert_from_16bit");
  const std::int64_t v = vector_part(dst, src, n);
  if (v > 0) {
    from_16bit_x4_kernel<<<blocks_for(v / 4), kThreads, 0, s>>>(
        reinterpret_cast<float4*>(dst), reinterpret_cast<const uint2*>(src), v / 4, bf16);
    check_launch("convert_from_16bit");
  }
  if (v < n) {
    from_16bit_kernel<<<blocks_for(n - v), kThreads, 0, s>>>(dst + v, src + v, n - v, bf16);
    check_launch("convert_from_16bit");
  }
}

void round_to_16bit(cudaStream_t s, float* dst, const float* src, std::int64_t n, bool bf16) {
  if (n <= 0) return;
  round_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n, bf16);
  check_launch("round_to_16bit");
}

void any_nonfinite(cudaStream_t s, int* flag, const float* x, std::int64_t n) {
  check(cudaMemsetAsync(flag, 0, sizeof(int), s), "any_nonfinite");
  if (n <= 0) return;
  nonfinite_kernel<<<blocks_for(n), kThreads, 0, s>>>(flag, x, n);
  check_launch("any_nonfinite");
}

}  // namespace dtrain::cuda
