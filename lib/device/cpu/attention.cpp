// Causal multi-head self-attention built from GEMMs per (batch, head), so the O(T^2 hs) work
// runs in BLAS. Per head: S = Q K^T * scale, P = causal softmax(S), Y = P V.
// Q, K, V of head h are column blocks of qkv with row stride 3C; Y is written straight into
// its column block of out (row stride C), so no transposes or copies are needed.
//
// Queries go in row blocks: rows [r0, r1) attend only to keys [0, r1), so the GEMMs skip most
// of the masked upper triangle, and a block's scores fit in cache. Forward saves either every
// probability (B*NH*T*T) or each row's log-sum-exp (2*B*NH*T), from which backward recomputes
// a block's probabilities with one more GEMM: FlashAttention's trade of a little compute for
// the T x T memory.
#include <algorithm>
#include <cmath>

#include "device/cpu/fastmath.hpp"
#include "device/cpu/kernels.hpp"
#include "device/cpu/parallel.hpp"
#include "device/half_bits.hpp"

namespace dtrain::cpu {
namespace {

// A log-sum-exp, mx + log(sum), is kept as two values, a bf16-exact head and the rest, so
// that it survives saved activations in 16 bits with about 16 significant bits (the CUDA
// kernels' layout). It is formed in double and never put together again: a score minus the
// head, minus the rest. In fp32, mx + log(sum) lost log(sum) to rounding at large scores
// (KernelGrad.AttentionLogSumExpAtLargeScores: gradients 2.02 apart from the saved
// probabilities' at scores of thousands, now 0.0107).
template <class T> void save_lse(T* lse, T mx, T sum) {
  const double value = static_cast<double>(mx) + std::log(static_cast<double>(sum));
  const T hi = static_cast<T>(halfbits::round_bf16(static_cast<float>(value)));
  lse[0] = hi;
  lse[1] = static_cast<T>(value - static_cast<double>(hi));
}
// exp(score - lse) of a score.
template <class T> T probability(T score, const T* lse) { return exp_any<T>((score - lse[0]) - lse[1]); }

// P holds rows [t0, t1) of the scores, row t at P + (t - t0) * ld: each becomes its causal
// softmax, zero above the diagonal up to column width. With lse, each row's log-sum-exp is
// saved there.
template <class T> void causal_softmax_rows(T* P, int ld, int t0, int t1, int width, T* lse) {
  parallel_for(t0, t1, static_cast<std::int64_t>(t1 - t0) * t1, [=](int t) {
    T* row = P + static_cast<std::int64_t>(t - t0) * ld;
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
    for (int j = t + 1; j < width; ++j) row[j] = 0;
    if (lse) save_lse(lse + 2 * t, mx, sum);
  });
}

// The same rows' probabilities again from the scores and the saved log-sum-exps.
template <class T> void causal_probabilities_rows(T* P, int ld, int t0, int t1, const T* lse) {
  parallel_for(t0, t1, static_cast<std::int64_t>(t1 - t0) * t1, [=](int t) {
    T* row = P + static_cast<std::int64_t>(t - t0) * ld;
    const T* l = lse + 2 * t;
    for (int j = 0; j <= t; ++j) row[j] = probability(row[j], l);
    for (int j = t + 1; j < t1; ++j) row[j] = 0;
  });
}

// Rows [t0, t1), laid out as above (row strides ld_dP, ld_P): dS <- P * (dP - rowsum(P * dP))
// * scale, in place over dP; zero above the diagonal.
template <class T>
void causal_softmax_backward_rows(T* dP, int ld_dP, const T* P, int ld_P, int t0, int t1,
                                  T scale) {
  parallel_for(t0, t1, static_cast<std::int64_t>(t1 - t0) * t1, [=](int t) {
    T* d = dP + static_cast<std::int64_t>(t - t0) * ld_dP;
    const T* p = P + static_cast<std::int64_t>(t - t0) * ld_P;
    T dot = 0;
    DTRAIN_OMP_SIMD_SUM(dot)
    for (int j = 0; j <= t; ++j) dot += p[j] * d[j];
    for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot) * scale;
    for (int j = t + 1; j < t1; ++j) d[j] = 0;
  });
}

// Query rows per block. Rows [r0, r1) attend only to keys [0, r1), so blocking skips most of
// the masked upper triangle; thinner blocks make thinner GEMMs. 256 measured fastest, or
// within the noise of it, from T = 256 to 2048 (bench/cpu_attention, docs/performance.md).
int attention_row_block(int block, int T_) { return std::min(block > 0 ? block : 256, T_); }

// Workspace rows are padded by 64 bytes, and its two row blocks 64 bytes apart beyond that,
// so that at the usual power-of-two T consecutive rows are not a multiple of 4 KiB apart
// (those share cache sets and make loads wait on unrelated stores). Some T still give such
// strides (T = 1008: rows 4096 B apart); no difference was measured there.
constexpr int kPad = 16;
int workspace_ld(int T_) { return T_ + kPad; }

}  // namespace

std::size_t attention_saved_elems(AttentionSaved what, int B, int T_, int NH) {
  const std::size_t rows = static_cast<std::size_t>(B) * NH * T_;
  return what == AttentionSaved::probabilities ? rows * T_ : 2 * rows;
}

std::size_t attention_workspace_elems(int T_, int block) {
  return 2 * static_cast<std::size_t>(attention_row_block(block, T_)) *
             static_cast<std::size_t>(workspace_ld(T_)) + kPad;
}

template <class T>
void attention_forward(T* out, T* saved, T* workspace, const T* qkv, int B, int T_, int C,
                       int NH, AttentionSaved what, int block) {
  block = attention_row_block(block, T_);
  const bool keep_probabilities = what == AttentionSaved::probabilities;
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int b = 0; b < B; ++b) {
    const T* base = qkv + static_cast<std::int64_t>(b) * T_ * C3;
    for (int h = 0; h < NH; ++h) {
      const T* Q = base + h * hs;
      const T* K = base + C + h * hs;
      const T* V = base + 2 * C + h * hs;
      const std::int64_t head = static_cast<std::int64_t>(b) * NH + h;
      T* lse = keep_probabilities ? nullptr : saved + 2 * head * T_;
      T* Y = out + static_cast<std::int64_t>(b) * T_ * C + h * hs;
      for (int r0 = 0; r0 < T_; r0 += block) {
        const int r1 = std::min(T_, r0 + block), rb = r1 - r0;
        const std::int64_t row0 = r0;  // r0 * 3C passes 2^31 at long sequences of a wide model
        T* P = keep_probabilities ? saved + (head * T_ + r0) * T_ : workspace;
        const int ld = keep_probabilities ? T_ : workspace_ld(T_);
        // S[r0:r1, 0:r1] = scale * Q[r0:r1] · K[0:r1]^T
        gemm<T>(false, true, rb, r1, hs, scale, Q + row0 * C3, C3, K, C3, T(0), P, ld);
        causal_softmax_rows(P, ld, r0, r1, keep_probabilities ? T_ : r1, lse);
        // Y[r0:r1] = P[r0:r1, 0:r1] · V[0:r1]
        gemm<T>(false, false, rb, hs, r1, T(1), P, ld, V, C3, T(0), Y + row0 * C, C);
      }
    }
  }
}

template <class T>
void attention_backward(T* dqkv, T* workspace, const T* dout, const T* qkv, const T* saved,
                        int B, int T_, int C, int NH, AttentionSaved what, int block,
                        bool accumulate) {
  block = attention_row_block(block, T_);
  const bool kept_probabilities = what == AttentionSaved::probabilities;
  // Each query block adds into dK and dV rows that earlier blocks wrote: to write dqkv over,
  // start from zeros.
  if (!accumulate) std::fill(dqkv, dqkv + static_cast<std::int64_t>(B) * T_ * 3 * C, T(0));
  const int hs = C / NH;
  const int C3 = 3 * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  const int ldw = workspace_ld(T_);
  T* dP = workspace;                                                     // one row block
  T* recomputed = workspace + static_cast<std::int64_t>(block) * ldw + kPad;  // the other
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
      const std::int64_t head = static_cast<std::int64_t>(b) * NH + h;
      const T* dY = dout + static_cast<std::int64_t>(b) * T_ * C + h * hs;
      for (int r0 = 0; r0 < T_; r0 += block) {
        const int r1 = std::min(T_, r0 + block), rb = r1 - r0;
        const std::int64_t row0 = r0;  // as in forward
        const T* P = recomputed;
        int ldP = ldw;
        if (kept_probabilities) {
          P = saved + (head * T_ + r0) * T_;
          ldP = T_;
        } else {  // P[r0:r1, 0:r1] = exp(scale * Q[r0:r1] · K[0:r1]^T - lse)
          gemm<T>(false, true, rb, r1, hs, scale, Q + row0 * C3, C3, K, C3, T(0), recomputed, ldw);
          causal_probabilities_rows(recomputed, ldw, r0, r1, saved + 2 * head * T_);
        }
        // dP[r0:r1, 0:r1] = dY[r0:r1] · V[0:r1]^T
        gemm<T>(false, true, rb, r1, hs, T(1), dY + row0 * C, C, V, C3, T(0), dP, ldw);
        // dV[0:r1] += P[r0:r1, 0:r1]^T · dY[r0:r1]
        gemm<T>(true, false, r1, hs, rb, T(1), P, ldP, dY + row0 * C, C, T(1), dV, C3);
        // dS = softmax backward, with the 1/sqrt(hs) of the forward folded in
        causal_softmax_backward_rows(dP, ldw, P, ldP, r0, r1, scale);
        // dQ[r0:r1] += dS[r0:r1, 0:r1] · K[0:r1];  dK[0:r1] += dS[r0:r1, 0:r1]^T · Q[r0:r1]
        gemm<T>(false, false, rb, hs, r1, T(1), dP, ldw, K, C3, T(1), dQ + row0 * C3, C3);
        gemm<T>(true, false, r1, hs, rb, T(1), dP, ldw, Q + row0 * C3, C3, T(1), dK, C3);
      }
    }
  }
}

#define DTRAIN_INSTANTIATE(T)                                                                 \
  template void attention_forward<T>(T*, T*, T*, const T*, int, int, int, int, AttentionSaved, \
                                     int);                                                    \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, \
                                      AttentionSaved, int, bool);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
