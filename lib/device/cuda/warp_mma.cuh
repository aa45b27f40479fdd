#pragma once
// Tensor-core products of one warp on registers (PTX ldmatrix and mma.sync m16n8k16), for
// kernels that keep their tiles in registers from one product to the next. The fragment
// layouts are PTX's ("Matrix Fragments for mma.m16n8k16 with floating point type"); with
// lane = 4 g + t, and two 16-bit values a register, the lower column (or row) in the low half:
//   A (16 x 16, by rows): a[0] row g, columns 2t and 2t + 1; a[1] row g + 8, the same
//     columns; a[2], a[3] the rows of a[0], a[1] at columns 8 + 2t and 8 + 2t + 1.
//   B (16 x 8):  b0 rows 2t and 2t + 1 of column g; b1 rows 8 + 2t and 8 + 2t + 1.
//   C, D (16 x 8, fp32): d[0], d[1] row g, columns 2t and 2t + 1; d[2], d[3] row g + 8.
// A C tile of 16 x 16 (two n-tiles) holds, register for register, the A operand of the same
// 16 x 16 values once rounded (to_operand), so a product's result feeds the next product
// without leaving the registers.
// The CUDA emulator builds its own version of these functions instead of this file
// (tests/cuda_emu/replaced/warp_mma.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace dtrain::cuda {

// Four 8 x 8 matrices of 16-bit values from shared memory: lanes 8i..8i+7 give the addresses
// of matrix i's rows (16-byte aligned); r[i] is this lane's part of matrix i, row g, columns
// 2t and 2t + 1.
__device__ inline void load_matrices(std::uint32_t (&r)[4], const std::uint16_t* row) {
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// The same matrices transposed: r[i] holds rows 2t and 2t + 1 of matrix i's column g.
__device__ inline void load_matrices_transposed(std::uint32_t (&r)[4], const std::uint16_t* row) {
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// d += a b, a (16 x 16) and b (16 x 8) 16-bit values of H, accumulated in fp32.
template <class H>
__device__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                    std::uint32_t b1);
template <>
__device__ inline void mma<__nv_bfloat16>(float (&d)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma<__half>(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                   std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to nearest (even) in H, as one operand register: lo in the low half.
template <class H> __device__ std::uint32_t pack(float lo, float hi);
template <> __device__ inline std::uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return std::uint32_t{__bfloat16_as_ushort(v.x)} | std::uint32_t{__bfloat16_as_ushort(v.y)} << 16;
}
template <> __device__ inline std::uint32_t pack<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return std::uint32_t{__half_as_ushort(v.x)} | std::uint32_t{__half_as_ushort(v.y)} << 16;
}

}  // namespace dtrain::cuda
