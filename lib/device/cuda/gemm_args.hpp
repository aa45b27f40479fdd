#pragma once
// Row-major GEMM requests expressed as column-major (cuBLAS) calls. A row-major matrix X with
// leading dimension ld is, read column-major with the same ld, its transpose. So
//   C[M,N] = op(A)[M,K] · op(B)[K,N]   (row-major)
// is the column-major product  C^T[N,M] = op(B)^T · op(A)^T, i.e. cuBLAS is called with the
// operands swapped, m = N, n = M, and each operand keeping its own transpose flag and ld.
// Plain C++, checked against the CPU GEMM without a GPU (tests/gpu/test_cuda_host_logic.cpp).
#include <cstdint>

namespace dtrain::cuda {

struct ColumnMajorGemm {
  bool trans_a = false, trans_b = false;  // cuBLAS's opA, opB
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  std::int64_t stride_a = 0;
  const float* b = nullptr;
  int ldb = 0;
  std::int64_t stride_b = 0;
  float* c = nullptr;
  int ldc = 0;
  std::int64_t stride_c = 0;
};

inline ColumnMajorGemm column_major_gemm(bool trans_a, bool trans_b, int M, int N, int K,
                                         const float* A, int lda, std::int64_t stride_a,
                                         const float* B, int ldb, std::int64_t stride_b,
                                         float* C, int ldc, std::int64_t stride_c) {
  ColumnMajorGemm g;
  g.trans_a = trans_b;
  g.trans_b = trans_a;
  g.m = N;
  g.n = M;
  g.k = K;
  g.a = B;
  g.lda = ldb;
  g.stride_a = stride_b;
  g.b = A;
  g.ldb = lda;
  g.stride_b = stride_a;
  g.c = C;
  g.ldc = ldc;
  g.stride_c = stride_c;
  return g;
}

}  // namespace dtrain::cuda
