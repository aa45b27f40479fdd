#include "device/cuda/bias_gemm.hpp"

#include <atomic>

#include "device/cuda/cuda_check.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain::cuda {
namespace {

// The largest power of two, up to 256, that divides the address: what the heuristic may
// assume of a buffer (its default, 256, would pick algorithms that fault on less).
std::uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// Whether the heuristic's status turns a case down rather than reports an error: no algorithm
// for it (NOT_SUPPORTED), or, for a 16-bit D only, INVALID_VALUE: the header documents the
// bias as D's type, and an fp32 bias with a 16-bit D is this plugin's request, not a
// documented case. (From the matmul, and for an fp32 D, INVALID_VALUE is an argument error.)
bool turned_down(cublasStatus_t status, cudaDataType d_type) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_INVALID_VALUE && d_type != CUDA_R_32F);
}

// Said once per process for each kind of output, fp32 and 16-bit: which case went to the
// other path and why (the GPU runs' logs show whether the epilogue runs at all).
void say_turned_down(const char* call, cublasStatus_t status, int m, int n, int k, cudaDataType d_type) {
  static std::atomic<bool> said[2] = {false, false};
  if (said[d_type == CUDA_R_32F ? 0 : 1].exchange(true)) return;
  DTRAIN_LOG(info, "CUDA plugin: " << call << " gave " << cublasGetStatusString(status) << " for a "
                                   << m << " x " << n << " x " << k << " GEMM with a bias epilogue and a "
                                   << (d_type == CUDA_R_32F ? "fp32" : "16-bit") << " output: such cases "
                                   << (d_type == CUDA_R_32F ? "lay the bias down before the GEMM"
                                                            : "write fp32 and round it after the GEMM")
                                   << " (reported once a kind of output)");
}

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, T value) {
  DTRAIN_CUDA(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}
template <typename T>
void set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute,
         T value) {
  DTRAIN_CUDA(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value));
}

}  // namespace

bool BiasGemm::Case::operator==(const Case& o) const {
  return trans_a == o.trans_a && trans_b == o.trans_b && m == o.m && n == o.n && k == o.k &&
         lda == o.lda && ldb == o.ldb && ldc == o.ldc && type == o.type && ab_type == o.ab_type &&
         d_type == o.d_type && align_a == o.align_a && align_b == o.align_b &&
         align_d == o.align_d && adds_c == o.adds_c && align_c == o.align_c &&
         align_bias == o.align_bias;
}

BiasGemm::BiasGemm(cudaStream_t stream, void* workspace, std::size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  DTRAIN_CUDA(cublasLtCreate(&lt_));
}

BiasGemm::~BiasGemm() {
  for (Plan& p : plans_) destroy(p);
  if (lt_) (void)cublasLtDestroy(lt_);
}

void BiasGemm::destroy(Plan& p) noexcept {
  if (p.a) (void)cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) (void)cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) (void)cublasLtMatrixLayoutDestroy(p.d);
  if (p.desc) (void)cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

BiasGemm::Plan* BiasGemm::plan_for(const Case& key, const float* bias) {
  for (Plan& p : plans_)
    if (p.key == key) return &p;
  if (plans_.size() >= kMaxPlans) return nullptr;
  Plan p;
  p.key = key;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    DTRAIN_CUDA(cublasLtMatmulDescCreate(&p.desc, key.type, CUDA_R_32F));
    set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA,
        static_cast<std::int32_t>(key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
    set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB,
        static_cast<std::int32_t>(key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
    set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
        static_cast<std::uint32_t>(CUBLASLT_EPILOGUE_BIAS));
    // The heuristic takes the bias's alignment from the pointer set here.
    set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
    // The bias stays fp32 whatever D is (its default type is D's), so a 16-bit D holds the
    // fp32 result rounded once, as an fp32 D rounded afterwards would.
    set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(CUDA_R_32F));
    // Layouts as stored: op(A) is m x k, so A is k x m when transposed.
    DTRAIN_CUDA(cublasLtMatrixLayoutCreate(&p.a, key.ab_type, key.trans_a ? key.k : key.m,
                                           key.trans_a ? key.m : key.k, key.lda));
    DTRAIN_CUDA(cublasLtMatrixLayoutCreate(&p.b, key.ab_type, key.trans_b ? key.n : key.k,
                                           key.trans_b ? key.k : key.n, key.ldb));
    DTRAIN_CUDA(cublasLtMatrixLayoutCreate(&p.d, key.d_type, key.m, key.n, key.ldc));
    DTRAIN_CUDA(cublasLtMatmulPreferenceCreate(&pref));
    set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        static_cast<std::uint64_t>(workspace_bytes_));
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
    // C has D's layout: D itself (beta 0) or the residual (beta 1)
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.adds_c ? key.align_c : key.align_d);
    set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
    // A 16-bit D: no algorithm that sums split-K parts in D's type (in place in D, or in
    // output-type scratch), so D holds the fp32 sum rounded once.
    if (key.d_type != CUDA_R_32F)
      set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
          static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
    // Turned down or no result: this case takes the caller's other path, every time.
    if (turned_down(status, key.d_type))
      say_turned_down("cublasLtMatmulAlgoGetHeuristic", status, key.m, key.n, key.k, key.d_type);
    else if (status != CUBLAS_STATUS_SUCCESS)
      check(status, "cublasLtMatmulAlgoGetHeuristic");
    p.usable = status == CUBLAS_STATUS_SUCCESS && found > 0 &&
               result.state == CUBLAS_STATUS_SUCCESS;
    p.algo = result.algo;
  } catch (...) {  // nothing kept: the next call tries again (and reports the error again)
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    destroy(p);
    throw;
  }
  (void)cublasLtMatmulPreferenceDestroy(pref);
  plans_.push_back(p);
  return &plans_.back();
}

bool BiasGemm::run(const ColumnMajorGemm& g, const void* a, const void* b, cudaDataType ab_type,
                   void* d, cudaDataType d_type, const float* bias, cublasComputeType_t type,
                   const float* c) {
  if (c && d_type != CUDA_R_32F) return false;  // C would have to be D's type
  const Case key{g.trans_a,      g.trans_b,    g.m,          g.n,
                 g.k,            g.lda,        g.ldb,        g.ldc,
                 type,           ab_type,      d_type,       alignment(a),
                 alignment(b),   alignment(d), alignment(bias), c ? alignment(c) : 256u,
                 c != nullptr};
  if (key.align_a < 16 || key.align_b < 16 || key.align_d < 16 || key.align_bias < 16 ||
      key.align_c < 16)
    return false;
  Plan* p = plan_for(key, bias);
  if (!p || !p->usable) return false;
  // The bias pointer is the one attribute that changes between calls (a memcpy, no allocation).
  set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(
      lt_, p->desc, &one, a, p->a, b, p->b, c ? &one : &zero, c ? static_cast<const void*>(c) : d,
      p->d, d, p->d, &p->algo, workspace_, workspace_bytes_, stream_);
  // A refusal of the case the heuristic offered (nothing queued) retires the plan, and this
  // call and later ones take the caller's other path; anything else is an error.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    say_turned_down("cublasLtMatmul", status, g.m, g.n, g.k, d_type);
    p->usable = false;
    return false;
  }
  check(status, "cublasLtMatmul");
  return true;
}

}  // namespace dtrain::cuda
