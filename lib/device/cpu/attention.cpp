// Causal multi-head self-attention built from GEMMs per (batch, head), so the O(T^2 hs) work
// runs in BLAS. Per head: S = Q K^T * scale, P = causal softmax(S) (saved), Y = P V.
// Q, K, V of head h are column blocks of qkv with row stride 3C; Y is written straight into
// its column block of out (row stride C), so no transposes or copies are needed.
#include <algorithm>
#include <cmath>

#include "device/cpu/fastmath.hpp"
#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"

namespace dtrain::cpu {
namespace {


// Rows [t0, t1) of P[T,T] <- causal softmax of the same rows of S (in place); entries above
// the diagonal become 0.
template <class T> void causal_softmax_rows(T* P, int T_, int t0, int t1) {
  DTRAIN_OMP_FOR_IF(static_cast<std::int64_t>(t1 - t0) * t1)
  for (int t = t0; t < t1; ++t) {
    T* row = P + static_cast<std::int64_t>(t) * T_;
    T mx = row[0];
    DTRAIN_OMP_SIMD_MAX(mx)
    for (int j = 1; j <= t; ++j) mx = row[j] > mx ? row[j] : mx;  // subtract the max: no overflow
    T sum = 0;
    DTRAIN_OMP_SIMD_SUM(sum)
    for (int j = 0; j <= t; ++j) {
      const T e = exp_any<T>(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    const T inv = T(1) / sum;
    for (int j = 0; j <= t; ++j) row[j] *= inv;
    for (int j = t + 1; j < T_; ++j) row[j] = 0;
  }
}

// Rows [t0, t1): dS <- P * (dP - rowsum(P * dP)) * scale, in place over dP; zero above the diagonal.
template <class T>
void causal_softmax_backward_rows(T* dP, const T* P, int T_, int t0, int t1, T scale) {
  DTRAIN_OMP_FOR_IF(static_cast<std::int64_t>(t1 - t0) * t1)
  for (int t = t0; t < t1; ++t) {
    T* d = dP + static_cast<std::int64_t>(t) * T_;
    const T* p = P + static_cast<std::int64_t>(t) * T_;
    T dot = 0;
    DTRAIN_OMP_SIMD_SUM(dot)
    for (int j = 0; j <= t; ++j) dot += p[j] * d[j];
    for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot) * scale;
    for (int j = t + 1; j < T_; ++j) d[j] = 0;
  }
}

}  // namespace

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH, int block) {
  if (block <= 0) block = kAttentionBlock;
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int b = 0; b < B; ++b) {
    const T* base = qkv + static_cast<std::int64_t>(b) * T_ * C3;
    for (int h = 0; h < NH; ++h) {
      const T* Q = base + h * hs;
      const T* K = base + C + h * hs;
      const T* V = base + 2 * C + h * hs;
      T* P = att + (static_cast<std::int64_t>(b) * NH + h) * T_ * T_;
      T* Y = out + static_cast<std::int64_t>(b) * T_ * C + h * hs;
      // Row blocks: rows [r0, r1) attend only to keys [0, r1), so the GEMMs skip most of
      // the masked upper triangle.
      for (int r0 = 0; r0 < T_; r0 += block) {
        const int r1 = std::min(T_, r0 + block), rb = r1 - r0;
        // S[r0:r1, 0:r1] = scale * Q[r0:r1] · K[0:r1]^T
        gemm<T>(false, true, rb, r1, hs, scale, Q + r0 * C3, C3, K, C3, T(0), P + r0 * T_, T_);
        causal_softmax_rows(P, T_, r0, r1);
        // Y[r0:r1] = P[r0:r1, 0:r1] · V[0:r1]
        gemm<T>(false, false, rb, hs, r1, T(1), P + r0 * T_, T_, V, C3, T(0), Y + r0 * C, C);
      }
    }
  }
}

template <class T>
void attention_backward(T* dqkv, T* workspace, const T* dout, const T* qkv, const T* att, int B,
                        int T_, int C, int NH, int block, bool accumulate) {
  if (block <= 0) block = kAttentionBlock;
  // Each query block adds into dK and dV rows that earlier blocks wrote: to write dqkv over,
  // start from zeros.
  if (!accumulate) std::fill(dqkv, dqkv + static_cast<std::int64_t>(B) * T_ * 3 * C, T(0));
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  T* dP = workspace;  // [T,T], reused for every head
  for (int b = 0; b < B; ++b) {
    const T* base = qkv + static_cast<std::int64_t>(b) * T_ * C3;
    T* dbase = dqkv + static_cast<std::int64_t>(b) * T_ * C3;
    for (int h = 0; h < NH; ++h) {
      const T* Q = base + h * hs;
      const T* K = base + C + h * hs;
      const T* V = base + 2 * C + h * hs;
      T* dQ = dbase + h * hs;
      T* dK = dbase + C + h * hs;
      T* dV = dbase + 2 * C + h * hs;
      const T* P = att + (static_cast<std::int64_t>(b) * NH + h) * T_ * T_;
      const T* dY = dout + static_cast<std::int64_t>(b) * T_ * C + h * hs;
      for (int r0 = 0; r0 < T_; r0 += block) {
        const int r1 = std::min(T_, r0 + block), rb = r1 - r0;
        T* dPb = dP + r0 * T_;
        const T* Pb = P + r0 * T_;
        // dP[r0:r1, 0:r1] = dY[r0:r1] · V[0:r1]^T
        gemm<T>(false, true, rb, r1, hs, T(1), dY + r0 * C, C, V, C3, T(0), dPb, T_);
        // dV[0:r1] += P[r0:r1, 0:r1]^T · dY[r0:r1]
        gemm<T>(true, false, r1, hs, rb, T(1), Pb, T_, dY + r0 * C, C, T(1), dV, C3);
        // dS = softmax backward, with the 1/sqrt(hs) of the forward folded in
        causal_softmax_backward_rows(dP, P, T_, r0, r1, scale);
        // dQ[r0:r1] += dS[r0:r1, 0:r1] · K[0:r1];  dK[0:r1] += dS[r0:r1, 0:r1]^T · Q[r0:r1]
        gemm<T>(false, false, rb, hs, r1, T(1), dPb, T_, K, C3, T(1), dQ + r0 * C3, C3);
        gemm<T>(true, false, r1, hs, rb, T(1), dPb, T_, Q + r0 * C3, C3, T(1), dK, C3);
      }
    }
  }
}

#define DTRAIN_INSTANTIATE(T)                                                            \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int, int);         \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, \
                                      int, int, bool);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
