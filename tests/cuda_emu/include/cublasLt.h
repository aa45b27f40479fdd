#pragma once
// CPU stand-in for the cuBLASLt calls of lib/device/cuda (bias_gemm.cpp): fp32 matrices, the
// DEFAULT and BIAS epilogues, D written in place of C. The heuristic hands back one algorithm
// that remembers the alignments the preference allowed and that of the bias pointer set at
// the time (as cuBLASLt reads it), and cublasLtMatmul refuses pointers aligned less than
// that (a real algorithm chosen for 256-byte alignment may fault on less).
// DTRAIN_CUDA_EMU_LT=0 makes the heuristic find nothing, as for a case the library does not
// support, and =invalid answer CUBLAS_STATUS_INVALID_VALUE for an fp32 bias with a 16-bit D,
// as a library keeping to its header's "the bias is D's type" might. A 16-bit D needs a preference whose reduction scheme mask
// leaves out the schemes that sum split-K parts in D's type (the emulator never splits K; the
// check holds the plugin to what a GPU's heuristic may otherwise pick). Implemented in
// cublas.cpp, beside the emulated GEMM.
#include <cstddef>
#include <cstdint>

#include "cublas_v2.h"

struct cublasLtContext;
typedef cublasLtContext* cublasLtHandle_t;
struct cublasLtMatmulDescOpaque;
typedef cublasLtMatmulDescOpaque* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque;
typedef cublasLtMatrixLayoutOpaque* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque;
typedef cublasLtMatmulPreferenceOpaque* cublasLtMatmulPreference_t;

typedef struct {
  std::uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,        // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,        // int32_t
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,      // uint32_t (cublasLtEpilogue_t)
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,  // void*
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,  // int32_t (cudaDataType; default -1: D's type)
};

enum cublasLtEpilogue_t { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4 };

enum cublasLtReductionScheme_t {
  CUBLASLT_REDUCTION_SCHEME_NONE = 0,
  CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,       // split-K parts summed in D, in D's type
  CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,  // in workspace, in the compute type
  CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,   // in workspace, in D's type
  CUBLASLT_REDUCTION_SCHEME_MASK = 7,
};

enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,  // uint64_t
  CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,  // uint32_t, default CUBLASLT_REDUCTION_SCHEME_MASK
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t type,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, std::size_t bytes);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          std::uint64_t rows, std::uint64_t cols,
                                          std::int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, std::size_t bytes);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t a,
                              const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D,
                              cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream);
