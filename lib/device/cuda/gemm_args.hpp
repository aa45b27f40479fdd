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

// Elements from the first one a column-major operand op(X) (rows x cols; stored cols x rows
// when trans) reads to its last, over `batch` matrices `stride` elements apart: the range a
// copy of it in another format must cover, gaps between columns included.
inline std::int64_t operand_span(bool trans, int rows, int cols, int ld, std::int64_t stride,
                                 int batch) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
  const int stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
  return static_cast<std::int64_t>(ld) * (stored_cols - 1) + stored_rows + stride * (batch - 1);
}
inline std::int64_t a_span(const ColumnMajorGemm& g, int batch) {
  return operand_span(g.trans_a, g.m, g.k, g.lda, g.stride_a, batch);
}
inline std::int64_t b_span(const ColumnMajorGemm& g, int batch) {
  return operand_span(g.trans_b, g.k, g.n, g.ldb, g.stride_b, batch);
}

}  // namespace dtrain::cuda
