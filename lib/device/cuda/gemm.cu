// GEMMs through cuBLAS (and cuBLASLt for a linear layer's bias) and the linear layer built on
// them. Row-major requests become column-major cuBLAS calls with the operands swapped
// (gemm_args.hpp). fp32 storage; the compute type is TF32 tensor cores or exact fp32
// (DTRAIN_CUDA_TF32), or, under mixed precision, bf16/fp16 tensor cores accumulating in fp32
// on 16-bit copies of the operands (rounded to nearest even, as the CPU rounds them).
#include <algorithm>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/gemm_args.hpp"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {
namespace {
inline cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }
}  // namespace

void CudaDevice::set_gemm_operand_format(DType fmt) {
  gemm_operands_ = check_float_format(fmt, "set_gemm_operand_format");
}

std::string CudaDevice::name() const {
  const char* gemms = gemm_operands_ == DType::bf16  ? "bf16"
                      : gemm_operands_ == DType::f16 ? "fp16"
                      : tf32_                        ? "TF32"
                                                     : "fp32";
  return name_ + ", " + gemms + " GEMMs" + (fused_attention_ ? "" : ", attention unfused") + ")";
}

cublasComputeType_t CudaDevice::compute_type() const noexcept {
  // 16-bit operands: their products are exact in fp32, which accumulates them
  const bool tf32 = gemm_operands_ == DType::f32 && tf32_;
  return tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

std::uint16_t* CudaDevice::staging(int slot, std::int64_t n) {
  const auto elements = static_cast<std::size_t>(n);
  if (elements > staging_elements_[slot]) {
    auto* grown = static_cast<std::uint16_t*>(alloc_.allocate(elements * sizeof(std::uint16_t)));
    alloc_.free(staging_[slot]);  // work queued before still sees it (the allocator's rule)
    staging_[slot] = grown;
    staging_elements_[slot] = elements;
  }
  return staging_[slot];
}

const std::uint16_t* CudaDevice::stage(int slot, const float* src, std::int64_t n) {
  std::uint16_t* words = staging(slot, n);
  cuda::convert_to_16bit(stream_, words, src, n, gemm_operands_ == DType::bf16);
  return words;
}

CudaDevice::GemmOperands CudaDevice::gemm_operands(const ColumnMajorGemm& g, int batch,
                                                   const std::uint16_t* a16,
                                                   const std::uint16_t* b16) {
  if (gemm_operands_ == DType::f32) return {g.a, g.b, CUDA_R_32F};
  const void* a = a16 ? a16 : stage(0, g.a, a_span(g, batch));
  const void* b = b16 ? b16 : stage(1, g.b, b_span(g, batch));
  return {a, b, gemm_operands_ == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F};
}

void CudaDevice::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                      const float* A, int lda, const float* B, int ldb, float beta, float* C,
                      int ldc) {
  if (M <= 0 || N <= 0) return;
  const OpProfile::Span span = begin_op(
      "gemm", gemm_work(M, N, std::max(K, 0), beta != 0.0f));
  queue_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void CudaDevice::queue_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                            const float* A, int lda, const float* B, int ldb, float beta,
                            float* C, int ldc, const std::uint16_t* A16,
                            const std::uint16_t* B16, std::uint16_t* C16) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // as on the CPU: C is scaled by beta (C16: +0 words, beta being 0)
    if (C16) {
      const std::size_t row = sizeof(std::uint16_t) * N;
      const int pieces = ldc == N ? 1 : M;  // rows apart, or all in one
      for (int i = 0; i < pieces; ++i)
        DTRAIN_CUDA(cudaMemsetAsync(C16 + static_cast<std::size_t>(i) * ldc, 0,
                                    row * (ldc == N ? M : 1), stream_));
    } else {
      scale_matrix(stream_, C, M, N, ldc, beta, 1, 0);
    }
    return;
  }
  const ColumnMajorGemm g =
      column_major_gemm(trans_a, trans_b, M, N, K, A, lda, 0, B, ldb, 0, C, ldc, 0);
  const GemmOperands x = gemm_operands(g, 1, /*a16=*/B16, /*b16=*/A16);  // swapped, as g's
  if (C16)
    run_gemm(g, x, alpha, 0.0f, C16, x.type);
  else
    run_gemm(g, x, alpha, beta, C, CUDA_R_32F);
}

void CudaDevice::run_gemm(const ColumnMajorGemm& g, const GemmOperands& x, float alpha,
                          float beta, void* c, cudaDataType c_type) {
  DTRAIN_CUDA(cublasGemmEx(blas_, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k, &alpha, x.a,
                           x.type, g.lda, x.b, x.type, g.ldb, &beta, c, c_type, g.ldc,
                           compute_type(), CUBLAS_GEMM_DEFAULT));
}

void CudaDevice::gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K,
                                      float alpha, const float* A, int lda,
                                      std::int64_t stride_a, const float* B, int ldb,
                                      std::int64_t stride_b, float beta, float* C, int ldc,
                                      std::int64_t stride_c, int batch) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  const OpProfile::Span span = begin_op(
      "gemm_strided_batched", gemm_work(M, N, std::max(K, 0), beta != 0.0f, batch));
  if (K <= 0) {
    scale_matrix(stream_, C, M, N, ldc, beta, batch, stride_c);
    return;
  }
  const ColumnMajorGemm g = column_major_gemm(trans_a, trans_b, M, N, K, A, lda, stride_a, B,
                                              ldb, stride_b, C, ldc, stride_c);
  const GemmOperands x = gemm_operands(g, batch);
  DTRAIN_CUDA(cublasGemmStridedBatchedEx(
      blas_, op(g.trans_a), op(g.trans_b), g.m, g.n, g.k, &alpha, x.a, x.type, g.lda, g.stride_a,
      x.b, x.type, g.ldb, g.stride_b, &beta, g.c, CUDA_R_32F, g.ldc, g.stride_c, batch,
      compute_type(), CUBLAS_GEMM_DEFAULT));
}

// out[N,OC] = inp[N,C] · weight[OC,C]^T + bias. With a bias, one cuBLASLt call adds it in the
// GEMM's epilogue (bias_gemm.hpp); where cuBLASLt has no algorithm for the case (or under
// DTRAIN_CUDA_GEMM_EPILOGUE=0), the bias is laid down first and the GEMM adds onto it
// (beta = 1), in the CPU kernel's order. A caller's inp16 is inp's GEMM operand as is. Where
// only out16 is wanted, the GEMM writes it, rounding its fp32 result once (the bias added
// before) as convert_to_16bit would; otherwise (and where cuBLASLt has no such algorithm) the
// fp32 result is rounded afterwards, from the scratch where out is null.
void CudaDevice::linear_forward(float* out, const float* inp, const float* weight,
                                const float* bias, int N, int C, int OC,
                                const std::uint16_t* inp16, std::uint16_t* out16) {
  DTRAIN_CHECK(!out16 || gemm_operands_ != DType::f32, Errc::invalid_argument,
               "linear_forward: a 16-bit copy needs 16-bit GEMM operands");
  DTRAIN_CHECK(out || out16, Errc::invalid_argument, "linear_forward: no output");
  OpWork work = gemm_work(N, OC, C, false);
  if (bias) work.bytes += 4.0 * OC;
  if (!out) work.bytes -= 2.0 * N * OC;  // 16-bit words written instead of floats
  if (readable(inp16)) work.bytes -= 2.0 * N * C;  // and read
  const OpProfile::Span span = begin_op("linear_forward", work);
  queue_linear(out, nullptr, inp, weight, bias, N, C, OC, inp16, out16);
}

// The residual joins in the bias epilogue (cuBLASLt's C, beta 1); without it, a pass after.
void CudaDevice::linear_forward_residual(float* out, const float* residual, const float* inp,
                                         const float* weight, const float* bias, int N, int C,
                                         int OC, const std::uint16_t* inp16) {
  OpWork work = gemm_work(N, OC, C, true);  // reads the residual
  if (bias) work.bytes += 4.0 * OC;
  if (readable(inp16)) work.bytes -= 2.0 * N * C;  // 16-bit words read instead of floats
  const OpProfile::Span span = begin_op("linear_forward", work);
  queue_linear(out, residual, inp, weight, bias, N, C, OC, inp16, nullptr);
}

void CudaDevice::queue_linear(float* out, const float* residual, const float* inp,
                              const float* weight, const float* bias, int N, int C, int OC,
                              const std::uint16_t* inp16, std::uint16_t* out16) {
  if (N <= 0 || OC <= 0) return;
  const std::size_t NO = static_cast<std::size_t>(N) * OC;
  ColumnMajorGemm g = column_major_gemm(false, true, N, OC, C, inp, C, 0, weight, C, 0, out, OC, 0);
  // Staged once, for whichever path below runs (inp is cuBLAS's B).
  const GemmOperands x = C > 0 ? gemm_operands(g, 1, nullptr, readable(inp16)) : GemmOperands{};
  if (!out) {
    if (C > 0 && linear_into_16bit(g, x, bias, out16)) return;
    out = g.c = scratch(NO);
  }
  const bool epilogue = bias && bias_gemm_ && C > 0 &&
                        bias_gemm_->run(g, x.a, x.b, x.type, out, CUDA_R_32F, bias,
                                        compute_type(), residual);
  if (!epilogue) {
    if (bias) broadcast_rows(stream_, out, bias, N, OC);
    const float beta = bias ? 1.0f : 0.0f;
    if (C > 0)
      run_gemm(g, x, 1.0f, beta, out, CUDA_R_32F);
    else  // as on the CPU: no products, the bias or zeros
      scale_matrix(stream_, out, N, OC, OC, beta, 1, 0);
    if (residual) cuda::residual_forward(stream_, out, residual, out, static_cast<std::int64_t>(NO));
  }
  if (out16) cuda::convert_to_16bit(stream_, out16, out, static_cast<std::int64_t>(NO),
                                    gemm_operands_ == DType::bf16);
}

bool CudaDevice::linear_into_16bit(const ColumnMajorGemm& g, const GemmOperands& x,
                                   const float* bias, std::uint16_t* out16) {
  if (bias) return bias_gemm_ && bias_gemm_->run(g, x.a, x.b, x.type, out16, x.type, bias,
                                                 compute_type());
  run_gemm(g, x, 1.0f, 0.0f, out16, x.type);  // cuBLAS rounds its fp32 result to a 16-bit C
  return true;
}

// dinp += dout · W (beta = 1, or 0 to write it over; dinp16: rounded by the GEMM into words);
// dweight += dout^T · inp (beta = 1); dbias += column sums of dout. A caller's inp16 / dout16
// is the GEMM operand as is; under 16-bit operands without dout16, the one pass that sums
// dout's columns also writes the operand both GEMMs read.
void CudaDevice::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, int N, int C, int OC,
                                 GradWrite dinp_write, const std::uint16_t* inp16,
                                 const std::uint16_t* dout16, std::uint16_t* dinp16) {
  const bool words = gemm_operands_ != DType::f32;
  const std::uint16_t* x16 = readable(inp16);
  const std::uint16_t* dy16 = readable(dout16);
  DTRAIN_CHECK(N == 0 || ((inp || x16 || !dweight) && (dout || (dy16 && !dbias))),
               Errc::invalid_argument,
               "linear_backward: no input or output gradient (a 16-bit one serves only under "
               "16-bit GEMM operands, and the bias gradient needs the fp32 one)");
  DTRAIN_CHECK(!dinp16 || (words && !dinp && dinp_write == GradWrite::overwrite),
               Errc::invalid_argument,
               "linear_backward: dinp16 needs 16-bit GEMM operands, no dinp and GradWrite::overwrite");
  const bool accumulate = dinp_write == GradWrite::accumulate;
  // dout: its words where given and a GEMM runs, its floats where there are no words or the
  // bias sum reads them; each gradient added into read and written
  const bool gemm = dinp || dinp16 || dweight;
  OpWork work{0, ((dy16 && gemm ? 2.0 : 0.0) + (!dy16 || dbias ? 4.0 : 0.0)) * N * OC};
  if (dinp || dinp16) {  // reads the weight
    work.flops += 2.0 * N * C * OC;
    work.bytes += 4.0 * OC * C + (dinp16 ? 2.0 : accumulate ? 8.0 : 4.0) * N * C;
  }
  if (dweight) {  // reads inp (its words where given)
    work.flops += 2.0 * N * C * OC;
    work.bytes += (x16 ? 2.0 : 4.0) * N * C + 8.0 * OC * C;
  }
  if (dbias) work.bytes += 8.0 * OC;
  const OpProfile::Span span = begin_op("linear_backward", work);
  if (words && !dy16 && dbias && N > 0 && OC > 0) {
    std::uint16_t* staged = staging(1, static_cast<std::int64_t>(N) * OC);
    column_sum_accumulate_and_round(stream_, dbias, staged, dout, N, OC,
                                    gemm_operands_ == DType::bf16,
                                    scratch(column_sum_scratch_floats(N, OC)));
    dy16 = staged;
    dbias = nullptr;  // summed
  }
  if (dinp || dinp16)
    queue_gemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, accumulate ? 1.0f : 0.0f,
               dinp, C, dy16, nullptr, dinp16);
  // dout is cuBLAS's B in both GEMMs: staged once under mixed precision. (Where this GEMM
  // has work, N, C and OC are positive, so the one above ran and staged it.)
  if (words && !dy16 && (dinp || dinp16)) dy16 = staging_[1];
  if (dweight)
    queue_gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, dy16, x16);
  if (dbias) {
    float* partials = scratch(column_sum_scratch_floats(N, OC));
    column_sum_accumulate(stream_, dbias, dout, N, OC, partials);
  }
}

}  // namespace dtrain::cuda
