// GEMM through OpenBLAS (row-major cblas). Strided-batched is a loop of cblas calls: OpenBLAS
// 0.3.21 has no batched entry point, and each call here is large enough to amortise dispatch.
#include <cblas.h>

#include "device/cpu/kernels.hpp"

namespace dtrain::cpu {
namespace {

inline CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

inline void blas_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void blas_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A,
                      int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* B, int ldb, T beta, T* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // cblas would still scale C by beta; do it here so K == 0 is well defined
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        T& c = C[static_cast<std::int64_t>(i) * ldc + j];
        c = beta == T(0) ? T(0) : c * beta;  // beta 0: C is not read (it may hold NaN), as BLAS
      }
    return;
  }
  blas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A,
                          int lda, std::int64_t stride_a, const T* B, int ldb,
                          std::int64_t stride_b, T beta, T* C, int ldc, std::int64_t stride_c,
                          int batch) {
  for (int i = 0; i < batch; ++i)
    gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
         C + i * stride_c, ldc);
}

#define DTRAIN_INSTANTIATE(T)                                                                 \
  template void gemm<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T, T*, int); \
  template void gemm_strided_batched<T>(bool, bool, int, int, int, T, const T*, int,           \
                                        std::int64_t, const T*, int, std::int64_t, T, T*, int, \
                                        std::int64_t, int);
DTRAIN_INSTANTIATE(float)
DTRAIN_INSTANTIATE(double)
#undef DTRAIN_INSTANTIATE

}  // namespace dtrain::cpu
