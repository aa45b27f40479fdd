// The emulated cuBLAS GEMMs (see cublas_v2.h here). Column-major, as cuBLAS: element (i, j) of
// an m x n matrix X with leading dimension ld is X[i + j * ld].
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublas_v2.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

// Round to nearest even, keeping `mantissa_bits` of fp32's 23 (TF32: 10, bf16: 7).
float round_mantissa(float x, int mantissa_bits) {
  if (!std::isfinite(x)) return x;
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const int drop = 23 - mantissa_bits;
  const std::uint32_t half = 1u << (drop - 1), lsb = (u >> drop) & 1u;
  u = (u + half - 1 + lsb) & ~((1u << drop) - 1);
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// fp16: 10 mantissa bits, 5 exponent bits (overflow to inf, subnormals below 2^-14).
float round_fp16(float x) {
  if (!std::isfinite(x)) return x;
  const float a = std::fabs(x);
  if (a >= 65520.0f) return std::copysign(INFINITY, x);
  if (a < 6.103515625e-05f) {  // subnormal: a multiple of 2^-24
    return std::nearbyint(x * 16777216.0f) / 16777216.0f;
  }
  return round_mantissa(x, 10);
}

float round_operand(float x, cublasComputeType_t type) {
  switch (type) {
    case CUBLAS_COMPUTE_32F_FAST_TF32: return round_mantissa(x, 10);
    case CUBLAS_COMPUTE_32F_FAST_16BF: return round_mantissa(x, 7);
    case CUBLAS_COMPUTE_32F_FAST_16F: return round_fp16(x);
    default: return x;
  }
}

// Elements spanned by a column-major rows x cols matrix with leading dimension ld.
std::size_t span(int rows, int cols, int ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<std::size_t>(cols - 1) * ld + rows;
}

struct Gemm {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
  cublasComputeType_t type;
};

cublasStatus_t check_and_size(const Gemm& g, const void* A, const void* B, const void* C,
                              long long sa, long long sb, long long sc, int batch) {
  if (g.m < 0 || g.n < 0 || g.k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int rows_a = g.ta ? g.k : g.m, cols_a = g.ta ? g.m : g.k;
  const int rows_b = g.tb ? g.n : g.k, cols_b = g.tb ? g.k : g.n;
  if (g.lda < (rows_a > 1 ? rows_a : 1) || g.ldb < (rows_b > 1 ? rows_b : 1) ||
      g.ldc < (g.m > 1 ? g.m : 1)) {
    std::fprintf(stderr, "cuBLAS emulator: leading dimension too small (m %d n %d k %d lda %d ldb %d ldc %d)\n",
                 g.m, g.n, g.k, g.lda, g.ldb, g.ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g.m == 0 || g.n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  auto extent = [&](std::size_t one, long long stride) {
    return (static_cast<std::size_t>(batch - 1) * static_cast<std::size_t>(stride) + one) *
           sizeof(float);
  };
  const bool reads_ab = g.k > 0;
  if ((reads_ab && (!dtrain_emu::device_range_ok(A, extent(span(rows_a, cols_a, g.lda), sa), "GEMM operand A") ||
                    !dtrain_emu::device_range_ok(B, extent(span(rows_b, cols_b, g.ldb), sb), "GEMM operand B"))) ||
      !dtrain_emu::device_range_ok(C, extent(span(g.m, g.n, g.ldc), sc), "GEMM result C"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

void run_gemm(const Gemm& g, const float* A, const float* B, float* C) {
  // Operands after transposition and rounding: a is m x k, b is k x n, both column-major.
  std::vector<float> a(static_cast<std::size_t>(g.m) * g.k), b(static_cast<std::size_t>(g.k) * g.n);
  for (int p = 0; p < g.k; ++p)
    for (int i = 0; i < g.m; ++i)
      a[i + static_cast<std::size_t>(p) * g.m] =
          round_operand(g.ta ? A[p + static_cast<std::size_t>(i) * g.lda] : A[i + static_cast<std::size_t>(p) * g.lda], g.type);
  for (int j = 0; j < g.n; ++j)
    for (int p = 0; p < g.k; ++p)
      b[p + static_cast<std::size_t>(j) * g.k] =
          round_operand(g.tb ? B[j + static_cast<std::size_t>(p) * g.ldb] : B[p + static_cast<std::size_t>(j) * g.ldb], g.type);
  std::vector<float> acc(g.m);
  for (int j = 0; j < g.n; ++j) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int p = 0; p < g.k; ++p) {
      const float bv = b[p + static_cast<std::size_t>(j) * g.k];
      const float* ac = &a[static_cast<std::size_t>(p) * g.m];
      for (int i = 0; i < g.m; ++i) acc[i] += ac[i] * bv;
    }
    float* c = C + static_cast<std::size_t>(j) * g.ldc;
    for (int i = 0; i < g.m; ++i)  // beta == 0: C is not read (it may hold NaN)
      c[i] = g.beta == 0.0f ? g.alpha * acc[i] : g.alpha * acc[i] + g.beta * c[i];
  }
}

cublasStatus_t gemm_batched(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, long long sa,
                            const void* B, cudaDataType Btype, int ldb, long long sb,
                            const void* beta, void* C, cudaDataType Ctype, int ldc,
                            long long sc, int batch, cublasComputeType_t type) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the plugin keeps fp32 storage
  const Gemm g{transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, lda, ldb, ldc,
               *static_cast<const float*>(alpha), *static_cast<const float*>(beta), type};
  const cublasStatus_t st = check_and_size(g, A, B, C, sa, sb, sc, batch);
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batch == 0) return st;
  const auto* a = static_cast<const float*>(A);
  const auto* b = static_cast<const float*>(B);
  auto* c = static_cast<float*>(C);
  dtrain_emu::enqueue(handle->stream, [=] {
    for (int i = 0; i < batch; ++i) run_gemm(g, a + i * sa, b + i * sb, c + i * sc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, std::size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes && !dtrain_emu::device_range_ok(workspace, bytes, "cuBLAS workspace"))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  return gemm_batched(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0,
                      beta, C, Ctype, ldc, 0, 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void* alpha, const void* A, cudaDataType Atype, int lda, long long strideA,
    const void* B, cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm_batched(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype,
                      ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}
