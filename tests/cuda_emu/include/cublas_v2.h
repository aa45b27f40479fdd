#pragma once
// CPU stand-in for the cuBLAS calls of lib/device/cuda (see cuda_runtime.h here): column-major
// GEMMs with cuBLAS's argument checks, A and B in fp32, bf16 or fp16 and C in fp32 (or 16
// bits, on a handle whose math mode disallows reduced-precision reduction: the plugin's
// promise that such a C is the fp32 sum rounded once; this one never splits K), fp32
// operands rounded as the compute type says (TF32, bf16 or fp16, fp32 accumulation), C left
// unread when beta is 0, and every operand checked to lie inside one device allocation. (The
// FAST_16BF/_16F rounding is what the documentation allows; an H200 with cuBLAS 13.0 ran
// FAST_16BF as TF32. The plugin no longer uses either.)
#include <cstdint>

#include "cuda_runtime.h"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };

enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
typedef cudaDataType cudaDataType_t;

enum cublasComputeType_t {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};

enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };

enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16 };

struct cublasContext;
typedef cublasContext* cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, std::size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void* alpha, const void* A, cudaDataType Atype, int lda, long long strideA,
    const void* B, cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo);
