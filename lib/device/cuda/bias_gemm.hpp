#pragma once
// BiasGemm: D = op(A) op(B) [+ C] + bias in one cuBLASLt call, the bias (fp32, one value per
// row of the column-major D, i.e. per output feature of a linear layer) added in the GEMM's
// epilogue (CUBLASLT_EPILOGUE_BIAS), D in fp32 or rounded to a 16-bit format there; C (fp32,
// D's shape, beta 1), where given, is a residual stream the output joins. linear_forward then
// writes its output once, instead of laying the bias down first and having the GEMM read it
// back and add onto it (or rounding an fp32 result in a pass of its own). A plan (the
// descriptors and the heuristic's algorithm) is made once per case, the shape, compute type
// and pointer alignments, and kept, so steps after the first make none.
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/cuda/gemm_args.hpp"

namespace dtrain::cuda {

class BiasGemm {
 public:
  // The workspace is the device's cuBLAS workspace: both libraries run on `stream` only.
  BiasGemm(cudaStream_t stream, void* workspace, std::size_t workspace_bytes);
  ~BiasGemm();
  BiasGemm(const BiasGemm&) = delete;
  BiasGemm& operator=(const BiasGemm&) = delete;

  // Queues D = op(A) op(B) + C + bias with g's shape and leading dimensions, A and B read from
  // `a` and `b` as `ab_type`, D written to `d` as `d_type`, C read from `c` (null: none; else
  // fp32 like D, with D's leading dimension; g's pointers and strides unused: one product).
  // Returns false, with nothing queued, where cuBLASLt's heuristic has no algorithm for the
  // case or turns it down (NOT_SUPPORTED, or INVALID_VALUE for a 16-bit D: whether it takes an
  // fp32 bias with a 16-bit D is its answer, not documented), or the matmul refuses the one it
  // offered (NOT_SUPPORTED: the plan is retired; each logged once a process), a pointer is
  // not 16-byte aligned, or kMaxPlans plans exist and the case is new; the caller then takes
  // its other path.
  bool run(const ColumnMajorGemm& g, const void* a, const void* b, cudaDataType ab_type, void* d,
           cudaDataType d_type, const float* bias, cublasComputeType_t type,
           const float* c = nullptr);

 private:
  struct Case {
    bool trans_a, trans_b;
    int m, n, k, lda, ldb, ldc;
    cublasComputeType_t type;
    cudaDataType ab_type, d_type;
    std::uint32_t align_a, align_b, align_d, align_bias, align_c;  // bytes, at most 256
    bool adds_c;
    bool operator==(const Case& o) const;
  };
  struct Plan {
    Case key;
    bool usable = false;  // the heuristic found an algorithm
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // The plan for `key`, made with `bias` (whose alignment the heuristic reads) if new; null
  // when the list is full.
  Plan* plan_for(const Case& key, const float* bias);
  static void destroy(Plan& p) noexcept;

  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_;
  void* workspace_;
  std::size_t workspace_bytes_;
  // A handful: one per linear layer shape and batch size. The cap keeps a caller that
  // varies the shape without end from growing the list (and its search) without end.
  static constexpr std::size_t kMaxPlans = 64;
  std::vector<Plan> plans_;
};

}  // namespace dtrain::cuda
