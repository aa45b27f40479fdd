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

}  // namespace

void convert_to_16bit(cudaStream_t s, std::uint16_t* dst, const float* src, std::int64_t n,
                      bool bf16) {
  if (n <= 0) return;
  to_16bit_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n, bf16);
  check_launch("convert_to_16bit");
}

void convert_from_16bit(cudaStream_t s, float* dst, const std::uint16_t* src, std::int64_t n,
                        bool bf16) {
  if (n <= 0) return;
  from_16bit_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n, bf16);
  check_launch("convert_from_16bit");
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
