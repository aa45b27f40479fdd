// The emulated cuBLAS and cuBLASLt GEMMs (see cublas_v2.h and cublasLt.h here). Column-major,
// as cuBLAS: element (i, j) of an m x n matrix X with leading dimension ld is X[i + j * ld].
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "device/half_bits.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
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
  cudaDataType ab_type;  // A's and B's: fp32, or bf16/fp16 (computed in fp32)
  cudaDataType c_type;   // C's: fp32, or ab_type (the fp32 result rounded)
};

// A and B in fp32 or a 16-bit format; C in fp32 or A's 16-bit format (what the plugin asks for).
bool supported_types(cudaDataType a, cudaDataType b, cudaDataType c) {
  const bool a_ok = a == CUDA_R_32F || a == CUDA_R_16BF || a == CUDA_R_16F;
  return a_ok && b == a && (c == CUDA_R_32F || c == a);
}

std::size_t element_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// Element i of an operand stored as `type`, as fp32.
float element(const void* p, std::size_t i, cudaDataType type) {
  switch (type) {
    case CUDA_R_16BF: return dtrain::halfbits::from_bf16(static_cast<const std::uint16_t*>(p)[i]);
    case CUDA_R_16F: return dtrain::halfbits::from_f16(static_cast<const std::uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Stores v as element i of a result of `type`, rounded to nearest even.
void store(void* p, std::size_t i, cudaDataType type, float v) {
  switch (type) {
    case CUDA_R_16BF: static_cast<std::uint16_t*>(p)[i] = dtrain::halfbits::to_bf16(v); break;
    case CUDA_R_16F: static_cast<std::uint16_t*>(p)[i] = dtrain::halfbits::to_f16(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

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
  auto extent = [&](std::size_t one, long long stride, std::size_t bytes = sizeof(float)) {
    return (static_cast<std::size_t>(batch - 1) * static_cast<std::size_t>(stride) + one) * bytes;
  };
  const std::size_t ab_bytes = element_bytes(g.ab_type);
  const bool reads_ab = g.k > 0;
  if ((reads_ab && (!dtrain_emu::device_range_ok(A, extent(span(rows_a, cols_a, g.lda), sa, ab_bytes), "GEMM operand A") ||
                    !dtrain_emu::device_range_ok(B, extent(span(rows_b, cols_b, g.ldb), sb, ab_bytes), "GEMM operand B"))) ||
      !dtrain_emu::device_range_ok(C, extent(span(g.m, g.n, g.ldc), sc, element_bytes(g.c_type)), "GEMM result C"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

// D = (alpha op(A) op(B) + beta C) + bias[i] on row i, in fp32, stored as g.c_type (C's type
// too). C is D unless given.
void run_gemm(const Gemm& g, const void* A, const void* B, void* D, const float* bias = nullptr,
              const void* C = nullptr) {
  if (!C) C = D;
  // Operands after transposition and rounding: a is m x k, b is k x n, both column-major.
  std::vector<float> a(static_cast<std::size_t>(g.m) * g.k), b(static_cast<std::size_t>(g.k) * g.n);
  for (int p = 0; p < g.k; ++p)
    for (int i = 0; i < g.m; ++i)
      a[i + static_cast<std::size_t>(p) * g.m] =
          round_operand(element(A, g.ta ? p + static_cast<std::size_t>(i) * g.lda : i + static_cast<std::size_t>(p) * g.lda, g.ab_type), g.type);
  for (int j = 0; j < g.n; ++j)
    for (int p = 0; p < g.k; ++p)
      b[p + static_cast<std::size_t>(j) * g.k] =
          round_operand(element(B, g.tb ? j + static_cast<std::size_t>(p) * g.ldb : p + static_cast<std::size_t>(j) * g.ldb, g.ab_type), g.type);
  std::vector<float> acc(g.m);
  for (int j = 0; j < g.n; ++j) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int p = 0; p < g.k; ++p) {
      const float bv = b[p + static_cast<std::size_t>(j) * g.k];
      const float* ac = &a[static_cast<std::size_t>(p) * g.m];
      for (int i = 0; i < g.m; ++i) acc[i] += ac[i] * bv;
    }
    const std::size_t c0 = static_cast<std::size_t>(j) * g.ldc;
    for (int i = 0; i < g.m; ++i) {  // beta == 0: C is not read (it may hold NaN)
      float v = g.beta == 0.0f ? g.alpha * acc[i]
                               : g.alpha * acc[i] + g.beta * element(C, c0 + i, g.c_type);
      if (bias) v += bias[i];
      store(D, c0 + i, g.c_type, v);
    }
  }
}

cublasStatus_t gemm_batched(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, long long sa,
                            const void* B, cudaDataType Btype, int ldb, long long sb,
                            const void* beta, void* C, cudaDataType Ctype, int ldc,
                            long long sc, int batch, cublasComputeType_t type) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!supported_types(Atype, Btype, Ctype)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (Ctype != CUDA_R_32F && !(handle->math & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) {
    std::fprintf(stderr, "cuBLAS emulator: a GEMM with a 16-bit C on a handle that allows reduced-precision "
                         "reduction (a GPU may sum split-K parts in C's type)\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Gemm g{transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, lda, ldb, ldc,
               *static_cast<const float*>(alpha), *static_cast<const float*>(beta), type, Atype,
               Ctype};
  const cublasStatus_t st = check_and_size(g, A, B, C, sa, sb, sc, batch);
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batch == 0) return st;
  const auto* a = static_cast<const char*>(A);
  const auto* b = static_cast<const char*>(B);
  auto* c = static_cast<char*>(C);
  const std::size_t ab_bytes = element_bytes(Atype), c_bytes = element_bytes(Ctype);
  dtrain_emu::enqueue(handle->stream, [=] {
    for (int i = 0; i < batch; ++i)
      run_gemm(g, a + i * sa * ab_bytes, b + i * sb * ab_bytes, c + i * sc * c_bytes);
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

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
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

// ---- cuBLASLt (see cublasLt.h here) -------------------------------------------------------

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque {
  cublasComputeType_t type;
  bool ta = false, tb = false;
  std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
  std::int32_t bias_type = -1;  // -1: D's type
};
struct cublasLtMatrixLayoutOpaque {
  std::uint64_t rows, cols;
  std::int64_t ld;
  cudaDataType type;
};
struct cublasLtMatmulPreferenceOpaque {
  std::uint64_t workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
  std::uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
};

namespace {
std::atomic<std::size_t> g_lt_heuristics{0}, g_lt_matmuls{0};

template <typename T>
bool read_attribute(T& out, const void* buf, std::size_t bytes) {
  if (!buf || bytes != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

bool aligned(const void* p, std::uint64_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// The largest power of two up to 256 dividing the address (256 for null).
std::uint64_t alignment_of(const void* p) {
  std::uint64_t a = 256;
  while (a > 1 && !aligned(p, a)) a /= 2;
  return a;
}
}  // namespace

// Calls so far, for tests: heuristic queries (one per new plan) and matmuls.
extern "C" __attribute__((visibility("default"))) std::size_t dtrain_cuda_emu_lt_heuristics() {
  return g_lt_heuristics.load();
}
extern "C" __attribute__((visibility("default"))) std::size_t dtrain_cuda_emu_lt_matmuls() {
  return g_lt_matmuls.load();
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t type,
                                        cudaDataType_t scale_type) {
  if (scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new cublasLtMatmulDescOpaque{type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, std::size_t bytes) {
  std::int32_t op = 0;
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = read_attribute(op, buf, bytes);
      desc->ta = op == CUBLAS_OP_T;
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = read_attribute(op, buf, bytes);
      desc->tb = op == CUBLAS_OP_T;
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = read_attribute(desc->epilogue, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read_attribute(desc->bias, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      ok = read_attribute(desc->bias_type, buf, bytes);
      break;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          std::uint64_t rows, std::uint64_t cols,
                                          std::int64_t ld) {
  if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ld < static_cast<std::int64_t>(rows > 1 ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque{rows, cols, ld, type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, std::size_t bytes) {
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      ok = read_attribute(pref->workspace, buf, bytes);
      break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      ok = read_attribute(pref->reduction_mask, buf, bytes);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      ok = read_attribute(pref->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf,
                          bytes);
      break;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  ++g_lt_heuristics;
  *returned = 0;
  const char* lt = std::getenv("DTRAIN_CUDA_EMU_LT");
  if (lt && std::strcmp(lt, "0") == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc->epilogue != CUBLASLT_EPILOGUE_BIAS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // op(A) is m x k, op(B) k x n, C and D m x n.
  const std::uint64_t m = c->rows, n = c->cols, k = desc->ta ? a->rows : a->cols;
  if ((desc->ta ? a->cols : a->rows) != m || (desc->tb ? b->cols : b->rows) != k ||
      (desc->tb ? b->rows : b->cols) != n || d->rows != m || d->cols != n || d->ld != c->ld)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported_types(a->type, b->type, c->type) || d->type != c->type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // DTRAIN_CUDA_EMU_LT=invalid: an fp32 bias with a 16-bit D turned down, as a library that
  // keeps to its header's "the bias is D's type" might
  if (lt && std::strcmp(lt, "invalid") == 0 && desc->epilogue == CUBLASLT_EPILOGUE_BIAS && d->type != CUDA_R_32F)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (d->type != CUDA_R_32F &&
      (pref->reduction_mask & (CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE))) {
    std::fprintf(stderr, "cuBLASLt emulator: a 16-bit D with a preference that allows split-K parts "
                         "summed in D's type\n");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Only an fp32 bias here (a 16-bit one is what real cuBLASLt defaults to for a 16-bit D).
  const std::int32_t bias_type = desc->bias_type == -1 ? d->type : desc->bias_type;
  if (desc->epilogue == CUBLASLT_EPILOGUE_BIAS && bias_type != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->align[i];
  results[0].algo.data[4] = alignment_of(desc->bias);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t a,
                              const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D,
                              cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!algo || c != d) return CUBLAS_STATUS_NOT_SUPPORTED;  // C with D's layout only, here
  // DTRAIN_CUDA_EMU_LT=refuse: the matmul refuses what the heuristic offered, nothing queued
  const char* lt = std::getenv("DTRAIN_CUDA_EMU_LT");
  if (lt && std::strcmp(lt, "refuse") == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS;
  const void* operands[5] = {A, B, C, D, bias ? desc->bias : nullptr};
  for (int i = 0; i < 5; ++i)
    if (!aligned(operands[i], algo->data[i])) {
      std::fprintf(stderr, "cuBLASLt emulator: %s at %p is not %llu-byte aligned, as its "
                   "algorithm was chosen for\n", i < 4 ? "an operand" : "the bias", operands[i],
                   static_cast<unsigned long long>(algo->data[i]));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  if (workspace_bytes && !dtrain_emu::device_range_ok(workspace, workspace_bytes, "cuBLASLt workspace"))
    return CUBLAS_STATUS_INVALID_VALUE;
  const Gemm g{desc->ta, desc->tb, static_cast<int>(c->rows), static_cast<int>(c->cols),
               static_cast<int>(desc->ta ? a->rows : a->cols), static_cast<int>(a->ld),
               static_cast<int>(b->ld), static_cast<int>(c->ld),
               *static_cast<const float*>(alpha), *static_cast<const float*>(beta), desc->type,
               a->type, c->type};
  if (!supported_types(a->type, b->type, c->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  cublasStatus_t st = check_and_size(g, A, B, D, 0, 0, 0, 1);
  if (st == CUBLAS_STATUS_SUCCESS && C != D && g.beta != 0.0f)
    st = check_and_size(g, A, B, C, 0, 0, 0, 1);
  if (st == CUBLAS_STATUS_SUCCESS && bias &&
      !dtrain_emu::device_range_ok(desc->bias, sizeof(float) * g.m, "cuBLASLt bias"))
    st = CUBLAS_STATUS_EXECUTION_FAILED;
  if (st != CUBLAS_STATUS_SUCCESS || g.m == 0 || g.n == 0) return st;
  ++g_lt_matmuls;
  const float* pbias = bias ? desc->bias : nullptr;  // read when it runs, as set now
  dtrain_emu::enqueue(stream, [=] { run_gemm(g, A, B, D, pbias, C); });
  return CUBLAS_STATUS_SUCCESS;
}
