#pragma once
// A CPU stand-in for CUDA's warp matrix functions (nvcuda::wmma), 16x16x16 tiles of bf16 or
// fp16 operands with fp32 accumulators, as far as lib/device/cuda uses them.
//
// On a GPU a fragment's elements are spread over the warp's lanes in an unspecified order.
// Here every lane holds the whole tile and does the whole product, so a kernel that only
// loads, multiplies and stores fragments gets the GPU's values, and nothing else is offered.
// Loads and stores are not warp barriers: a lane that reads a tile its neighbours are still
// writing (a missing __syncwarp) reads stale values. The GPU's pointer and stride rules are
// checked: 32-byte aligned tiles, strides a multiple of 16 bytes; and every call is counted,
// so a warp whose lanes made different numbers of calls (a lane that skipped one) stops the
// run when its block ends.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "device/half_bits.hpp"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline float decode(__nv_bfloat16 h) { return dtrain::halfbits::from_bf16(h.bits); }
inline float decode(__half h) { return dtrain::halfbits::from_f16(h.bits); }

// Counts a load or store and checks the GPU's rules for its tile.
template <class T> void tile_call(const T* p, unsigned ldm, const char* what) {
  dtrain_emu::count_warp_call();
  const bool aligned = reinterpret_cast<std::uintptr_t>(p) % 32 == 0;
  const bool stride = (ldm * sizeof(T)) % 16 == 0;
  if (aligned && stride) return;
  std::fprintf(stderr, "CUDA emulator: %s with %s (pointer %p, ldm %u)\n", what,
               aligned ? "a stride that is not a multiple of 16 bytes" : "a tile not 32-byte aligned",
               static_cast<const void*>(p), ldm);
  std::abort();
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;

// Operand tiles, decoded to float: a is M x K, b is K x N, element (r, c) at v[r][c].
template <int M, int N, int K, class T, class Layout>
struct fragment<matrix_a, M, N, K, T, Layout> {
  static_assert(M == 16 && N == 16 && K == 16, "16x16x16 tiles only");
  float v[16][16];
};
template <int M, int N, int K, class T, class Layout>
struct fragment<matrix_b, M, N, K, T, Layout> {
  static_assert(M == 16 && N == 16 && K == 16, "16x16x16 tiles only");
  float v[16][16];
};
template <int M, int N, int K>
struct fragment<accumulator, M, N, K, float, void> {
  static_assert(M == 16 && N == 16 && K == 16, "16x16x16 tiles only");
  float v[16][16];
};

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  detail::tile_call(p, ldm, "load_matrix_sync");
  constexpr bool rows = std::is_same<Layout, row_major>::value;
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c) f.v[r][c] = detail::decode(rows ? p[r * ldm + c] : p[c * ldm + r]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  detail::tile_call(p, ldm, "load_matrix_sync");
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      f.v[r][c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  detail::tile_call(p, ldm, "store_matrix_sync");
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c)
      (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.v[r][c];
}

template <class Use, class T, class Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float value) {
  dtrain_emu::count_warp_call();
  for (auto& row : f.v)
    for (float& x : row) x = value;
}

// d = a b + c, accumulated in fp32 (c may be d).
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  dtrain_emu::count_warp_call();
  float out[16][16];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.v[r][n];
      for (int k = 0; k < 16; ++k) s += a.v[r][k] * b.v[k][n];
      out[r][n] = s;
    }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) d.v[r][n] = out[r][n];
}

}  // namespace wmma
}  // namespace nvcuda
