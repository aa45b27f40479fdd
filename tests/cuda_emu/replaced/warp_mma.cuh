#pragma once
// The CUDA emulator's lib/device/cuda/warp_mma.cuh: the same functions on the same fragment
// layouts (described there, from PTX's), computed on the CPU. A warp-wide call hands every
// lane's registers or row address to the whole warp (dtrain_emu::warp_gather), which is a
// warp barrier here: unlike on a GPU, a lane's load_matrices sees what the other lanes wrote
// before it even without a __syncwarp. Products accumulate in fp32 in the order of k.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"
#include "device/half_bits.hpp"

namespace dtrain::cuda {
namespace emulated {

inline int lane() {
  return static_cast<int>((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31);
}

template <class H> float decode(std::uint32_t reg, int high) {
  const auto bits = static_cast<std::uint16_t>(high ? reg >> 16 : reg & 0xFFFFu);
  return std::is_same<H, __nv_bfloat16>::value ? halfbits::from_bf16(bits)
                                               : halfbits::from_f16(bits);
}

// Every lane's row address, checked as the GPU requires (16-byte aligned).
inline void row_addresses(const std::uint16_t* (&rows)[32], const std::uint16_t* row) {
  if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "CUDA emulator: load_matrices from a row not 16-byte aligned (%p)\n",
                 static_cast<const void*>(row));
    std::abort();
  }
  dtrain_emu::warp_gather(&row, sizeof row, rows);
}

inline std::uint32_t two(std::uint16_t lo, std::uint16_t hi) {
  return std::uint32_t{lo} | std::uint32_t{hi} << 16;
}

}  // namespace emulated

inline void load_matrices(std::uint32_t (&r)[4], const std::uint16_t* row) {
  const std::uint16_t* rows[32];
  emulated::row_addresses(rows, row);
  const int g = emulated::lane() >> 2, t = emulated::lane() & 3;
  for (int i = 0; i < 4; ++i) {
    const std::uint16_t* p = rows[8 * i + g];
    r[i] = emulated::two(p[2 * t], p[2 * t + 1]);
  }
}

inline void load_matrices_transposed(std::uint32_t (&r)[4], const std::uint16_t* row) {
  const std::uint16_t* rows[32];
  emulated::row_addresses(rows, row);
  const int g = emulated::lane() >> 2, t = emulated::lane() & 3;
  for (int i = 0; i < 4; ++i) r[i] = emulated::two(rows[8 * i + 2 * t][g], rows[8 * i + 2 * t + 1][g]);
}

template <class H>
void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  struct Registers {
    std::uint32_t a[4], b[2];
  };
  const Registers mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  Registers all[32];
  dtrain_emu::warp_gather(&mine, sizeof mine, all);
  const int g = emulated::lane() >> 2, t = emulated::lane() & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) {
      // A(row, k): lane 4 (row % 8) + (k % 8) / 2, register row / 8 + 2 (k / 8);
      // B(k, col): lane 4 col + (k % 8) / 2, register k / 8; the half is k % 2 in both.
      const float x = emulated::decode<H>(all[4 * (row % 8) + (k % 8) / 2].a[row / 8 + 2 * (k / 8)], k % 2);
      const float y = emulated::decode<H>(all[4 * col + (k % 8) / 2].b[k / 8], k % 2);
      sum += x * y;
    }
    d[i] = sum;
  }
}

template <class H> std::uint32_t pack(float lo, float hi) {
  if (std::is_same<H, __nv_bfloat16>::value)
    return emulated::two(halfbits::to_bf16(lo), halfbits::to_bf16(hi));
  return emulated::two(halfbits::to_f16(lo), halfbits::to_f16(hi));
}

}  // namespace dtrain::cuda
