#pragma once
// OpWork: what one Device op computes and moves, so that the profile (op_profile.hpp) can
// print rates to hold against the GPU's peaks. flops: the floating-point operations of the
// op's matrix products, as performed (the unfused attention multiplies the whole T x T
// square, the fused one only the causal blocks). bytes: what the op must move to or from
// device memory at the least: each input read once, each output written once, an output it
// adds into read and written; fp32 and int32 elements are 4 bytes, 16-bit words 2. An op
// that moves more than that (extra passes, re-reads that miss the cache) shows a lower GB/s.
#include <cmath>
#include <cstdint>

namespace dtrain::cuda {

struct OpWork {
  double flops = 0;
  double bytes = 0;
};

// n fp32 elements moved (read or written once each).
inline OpWork floats_moved(double n) { return {0, 4.0 * n}; }

// batch x (C[M,N] = A[M,K] B[K,N]), C also read where beta != 0.
inline OpWork gemm_work(double M, double N, double K, bool reads_c, double batch = 1) {
  const double c = reads_c ? 2.0 : 1.0;
  return {2.0 * M * N * K * batch, 4.0 * (M * K + K * N + c * M * N) * batch};
}

// Causal attention over B sequences of T tokens, NH heads of size hs = C / NH. The products
// of a (query, key) pair cost 2 hs flops each: forward Q K^T and P V; backward P^T dY, dY V^T,
// dS K and dS^T Q unfused, and the fused kernels recompute Q K^T in both of their passes and
// dY V^T in the second (7 products). The unfused GEMMs (fused_block 0) take every pair of the
// T x T square; the fused kernels every pair of their blocks (fused_block rows a side) on or
// below the diagonal, the masked half of the diagonal blocks and the padding past T included.
// `saved` is what the forward saves per sequence and head: the T x T probabilities, or the
// fused kernels' 2 floats per row. Backward adds into dqkv, or writes it over without
// `accumulate`.
inline OpWork attention_work(bool backward, int fused_block, double B, double T, double C,
                             double NH, bool accumulate = true) {
  const bool fused = fused_block > 0;
  const double blocks = fused ? std::ceil(T / fused_block) : 0;
  const double hs = C / NH;
  const double pairs = fused ? blocks * (blocks + 1) / 2 * fused_block * fused_block : T * T;
  const double products = backward ? (fused ? 7 : 4) : 2;
  const double saved = fused ? 2 * T : T * T;
  const double tokens = B * T;
  // forward: qkv read, out written, saved written; backward: dout, qkv and saved read, dqkv
  // added into (or written), and the fused kernels also read out.
  const double dqkv = (accumulate ? 6 : 3) * C;
  const double floats = backward ? tokens * (C + 3 * C + dqkv + (fused ? C : 0)) + B * NH * saved
                                 : tokens * (3 * C + C) + B * NH * saved;
  return {2.0 * hs * pairs * products * B * NH, 4.0 * floats};
}

}  // namespace dtrain::cuda
