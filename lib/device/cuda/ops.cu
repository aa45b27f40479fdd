// CudaDevice: the remaining ops, each forwarding to its kernel launcher on the device stream.
#include <algorithm>
#include <cmath>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {

void CudaDevice::embedding_forward(float* out, const std::int32_t* tokens, const float* wte,
                                   int N, int C, int vocab_start, int vocab_rows) {
  const OpProfile::Span span = begin_op("embedding_forward", floats_moved(2.0 * N * C + N));
  cuda::embedding_forward(stream_, out, tokens, wte, N, C, vocab_start, vocab_rows);
}
void CudaDevice::embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens,
                                    int N, int C, int vocab_start, int vocab_rows) {
  const OpProfile::Span span = begin_op(
      "embedding_backward", floats_moved(1.0 * N * C + N + 2.0 * std::min(N, vocab_rows) * C));
  const std::size_t bytes = cuda::embedding_backward_workspace_bytes(N);
  cuda::embedding_backward(stream_, dwte, dout, tokens, N, C, vocab_start, vocab_rows,
                           scratch((bytes + sizeof(float) - 1) / sizeof(float)));
}
void CudaDevice::positional_forward(float* out, const float* wpe, int B, int T, int C) {
  const OpProfile::Span span = begin_op(
      "positional_forward", floats_moved((2.0 * B + 1) * T * C));
  cuda::positional_forward(stream_, out, wpe, B, T, C);
}
void CudaDevice::positional_backward(float* dwpe, const float* dout, int B, int T, int C) {
  const OpProfile::Span span = begin_op("positional_backward", floats_moved((B + 2.0) * T * C));
  cuda::positional_backward(stream_, dwpe, dout, B, T, C);
}

void CudaDevice::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                   const float* weight, const float* bias, int N, int C,
                                   std::uint16_t* out16) {
  DTRAIN_CHECK(!out16 || gemm_operands_ != DType::f32, Errc::invalid_argument,
               "layernorm_forward: a 16-bit copy needs 16-bit GEMM operands");
  DTRAIN_CHECK(out || out16, Errc::invalid_argument, "layernorm_forward: no output");
  OpWork work = floats_moved((out ? 2.0 : 1.0) * N * C + 2.0 * C + 2.0 * N);
  if (out16) work.bytes += 2.0 * N * C;
  const OpProfile::Span span = begin_op("layernorm_forward", work);
  cuda::layernorm_forward(stream_, out, mean, rstd, inp, weight, bias, N, C, out16,
                          gemm_operands_ == DType::bf16);
}
void CudaDevice::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                    const float* inp, const float* weight, const float* mean,
                                    const float* rstd, int N, int C,
                                    const std::uint16_t* dout16) {
  dout16 = readable(dout16);
  DTRAIN_CHECK(N <= 0 || C <= 0 || dout || dout16, Errc::invalid_argument,
               "layernorm_backward: no output gradient (a 16-bit one serves only under 16-bit "
               "GEMM operands)");
  OpWork work = floats_moved(4.0 * N * C + 5.0 * C + 2.0 * N);
  if (dout16) work.bytes -= 2.0 * N * C;  // dout in words
  const OpProfile::Span span = begin_op("layernorm_backward", work);
  float* partials = scratch(layernorm_backward_scratch_floats(N, C));
  cuda::layernorm_backward(stream_, dinp, dweight, dbias, dout16 ? nullptr : dout, dout16,
                           gemm_operands_ == DType::bf16, inp, weight, mean, rstd, N, C,
                           partials);
}

void CudaDevice::gelu_forward(float* out, const float* inp, std::int64_t n, std::uint16_t* inp16,
                              std::uint16_t* out16) {
  DTRAIN_CHECK((!inp16 && !out16) || gemm_operands_ != DType::f32, Errc::invalid_argument,
               "gelu_forward: 16-bit copies need 16-bit GEMM operands");
  DTRAIN_CHECK(n <= 0 || out || out16, Errc::invalid_argument, "gelu_forward: no output");
  OpWork work = floats_moved(out ? 2.0 * n : 1.0 * n);
  work.bytes += 2.0 * n * ((inp16 ? 1 : 0) + (out16 ? 1 : 0));
  const OpProfile::Span span = begin_op("gelu_forward", work);
  cuda::gelu_forward(stream_, out, inp, n, inp16, out16, gemm_operands_ == DType::bf16);
}
void CudaDevice::gelu_forward_16bit(std::uint16_t* out16, const std::uint16_t* inp16,
                                    std::int64_t n) {
  DTRAIN_CHECK(gemm_operands_ != DType::f32, Errc::unavailable,
               "gelu_forward_16bit: " << name() << " has fp32 GEMM operands");
  const OpProfile::Span span = begin_op("gelu_forward", floats_moved(1.0 * n));  // 2 x 2 bytes
  cuda::gelu_16bit(stream_, out16, inp16, n, gemm_operands_ == DType::bf16);
}
void CudaDevice::gelu_backward_rounded(std::uint16_t* dinp16, float* dbias,
                                       const std::uint16_t* inp16, const float* dout, int rows,
                                       int cols, const std::uint16_t* dout16) {
  DTRAIN_CHECK(gemm_operands_ != DType::f32, Errc::unavailable,
               "gelu_backward_rounded: " << name() << " has fp32 GEMM operands");
  DTRAIN_CHECK(rows <= 0 || cols <= 0 || (dbias && (dout || dout16)), Errc::invalid_argument,
               "gelu_backward_rounded: no bias gradient to add the sums into, or no dout");
  const double n = static_cast<double>(rows) * cols;
  // dout (floats or words), the input's and the gradient's words; dbias read and written
  const OpWork work{0.0, (dout16 ? 6.0 : 8.0) * n + 8.0 * cols};
  const OpProfile::Span span = begin_op("gelu_backward", work);
  cuda::gelu_backward_rounded(stream_, dinp16, dbias, inp16, dout, dout16, rows, cols,
                              gemm_operands_ == DType::bf16,
                              scratch(column_sum_scratch_floats(rows, cols)));
}
void CudaDevice::gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                               GradWrite dinp_write, const std::uint16_t* inp16) {
  const bool accumulate = dinp_write == GradWrite::accumulate;
  const bool words = readable(inp16) != nullptr;
  DTRAIN_CHECK(n == 0 || inp || words, Errc::invalid_argument,
               "gelu_backward: no input (a 16-bit one serves only under 16-bit GEMM operands)");
  OpWork work = floats_moved((accumulate ? 3.0 : 2.0) * n);
  work.bytes += (words ? 2.0 : 4.0) * n;  // the input
  const OpProfile::Span span = begin_op("gelu_backward", work);
  if (words) {
    cuda::gelu_backward_16bit(stream_, dinp, inp16, gemm_operands_ == DType::bf16, dout, n,
                              accumulate);
  } else {
    cuda::gelu_backward(stream_, dinp, inp, dout, n, accumulate);
  }
}

void CudaDevice::residual_forward(float* out, const float* a, const float* b, std::int64_t n) {
  const OpProfile::Span span = begin_op("residual_forward", floats_moved(3.0 * n));
  cuda::residual_forward(stream_, out, a, b, n);
}
void CudaDevice::accumulate(float* dst, const float* src, std::int64_t n) {
  const OpProfile::Span span = begin_op("accumulate", floats_moved(3.0 * n));
  cuda::accumulate(stream_, dst, src, n);
}
void CudaDevice::scale(float* x, float s, std::int64_t n) {
  const OpProfile::Span span = begin_op("scale", floats_moved(2.0 * n));
  cuda::scale(stream_, x, s, n);
}
void CudaDevice::fill(float* x, float value, std::int64_t n) {
  const OpProfile::Span span = begin_op("fill", floats_moved(n));
  cuda::fill(stream_, x, value, n);
}
void CudaDevice::copy_floats(float* dst, const float* src, std::int64_t n) {
  if (n <= 0 || dst == src) return;
  const OpProfile::Span span = begin_op("copy_floats", floats_moved(2.0 * n));
  DTRAIN_CUDA(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream_));
}

void CudaDevice::convert_to_16bit(std::uint16_t* dst, const float* src, std::int64_t n,
                                  DType fmt) {
  const bool bf16 = check_16bit_format(fmt, "convert_to_16bit") == DType::bf16;
  const OpProfile::Span span = begin_op("convert_to_16bit", floats_moved(1.5 * n));
  cuda::convert_to_16bit(stream_, dst, src, n, bf16);
}
void CudaDevice::convert_from_16bit(float* dst, const std::uint16_t* src, std::int64_t n,
                                    DType fmt) {
  const bool bf16 = check_16bit_format(fmt, "convert_from_16bit") == DType::bf16;
  const OpProfile::Span span = begin_op("convert_from_16bit", floats_moved(1.5 * n));
  cuda::convert_from_16bit(stream_, dst, src, n, bf16);
}
void CudaDevice::round_to_16bit(float* dst, const float* src, std::int64_t n, DType fmt) {
  const bool bf16 = check_16bit_format(fmt, "round_to_16bit") == DType::bf16;
  const OpProfile::Span span = begin_op("round_to_16bit", floats_moved(2.0 * n));
  cuda::round_to_16bit(stream_, dst, src, n, bf16);
}

void CudaDevice::crossentropy_forward(float* losses, float* lse, const float* logits,
                                      const std::int32_t* targets, int N, int V, int Vp) {
  const OpProfile::Span span = begin_op(
      "crossentropy_forward", floats_moved(1.0 * N * V + 3.0 * N));
  cuda::crossentropy_forward(stream_, losses, lse, logits, targets, N, V, Vp);
}
void CudaDevice::crossentropy_forward_16bit(float* losses, float* lse,
                                            const std::uint16_t* logits16,
                                            const std::int32_t* targets, int N, int V, int Vp) {
  DTRAIN_CHECK(gemm_operands_ != DType::f32, Errc::unavailable,
               "crossentropy_forward_16bit: " << name() << " has fp32 GEMM operands");
  OpWork work = floats_moved(3.0 * N);
  work.bytes += 2.0 * N * V;
  const OpProfile::Span span = begin_op("crossentropy_forward", work);
  cuda::crossentropy_forward_16bit(stream_, losses, lse, logits16, gemm_operands_ == DType::bf16,
                                   targets, N, V, Vp);
}
void CudaDevice::crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                       const std::int32_t* targets, const float* dlosses, int N,
                                       int V, int Vp) {
  const OpProfile::Span span = begin_op(
      "crossentropy_backward", floats_moved(1.0 * N * V + 1.0 * N * Vp + 3.0 * N));
  cuda::crossentropy_backward(stream_, dlogits, logits, lse, targets, dlosses, N, V, Vp);
}
void CudaDevice::crossentropy_shard_stats(float* max, float* target_logit, const float* logits,
                                          const std::int32_t* targets, int N, int V, int ld,
                                          int vocab_start) {
  const OpProfile::Span span = begin_op(
      "crossentropy_shard_stats", floats_moved(1.0 * N * V + 3.0 * N));
  cuda::crossentropy_shard_stats(stream_, max, target_logit, logits, targets, N, V, ld,
                                 vocab_start);
}
void CudaDevice::crossentropy_shard_sumexp(float* sumexp, const float* logits, const float* max,
                                           int N, int V, int ld) {
  const OpProfile::Span span = begin_op(
      "crossentropy_shard_sumexp", floats_moved(1.0 * N * V + 2.0 * N));
  cuda::crossentropy_shard_sumexp(stream_, sumexp, logits, max, N, V, ld);
}
void CudaDevice::crossentropy_shard_finish(float* losses, float* lse, const float* max,
                                           const float* sumexp, const float* target_logit,
                                           int N) {
  const OpProfile::Span span = begin_op("crossentropy_shard_finish", floats_moved(5.0 * N));
  cuda::crossentropy_shard_finish(stream_, losses, lse, max, sumexp, target_logit, N);
}
void CudaDevice::crossentropy_shard_backward(float* dlogits, const float* logits,
                                             const float* lse, const std::int32_t* targets,
                                             const float* dlosses, int N, int V, int ld,
                                             int vocab_start) {
  const OpProfile::Span span = begin_op(
      "crossentropy_shard_backward", floats_moved(1.0 * N * V + 1.0 * N * ld + 3.0 * N));
  cuda::crossentropy_shard_backward(stream_, dlogits, logits, lse, targets, dlosses, N, V, ld,
                                    vocab_start);
}

void CudaDevice::crossentropy_backward_16bit(std::uint16_t* dlogits16, const float* logits,
                                             const float* lse, const std::int32_t* targets,
                                             const float* dlosses, int N, int V, int ld,
                                             int vocab_start, const std::uint16_t* logits16) {
  DTRAIN_CHECK(gemm_operands_ != DType::f32, Errc::invalid_argument,
               "crossentropy_backward_16bit: the GEMM operands are fp32");
  DTRAIN_CHECK(N <= 0 || logits || logits16, Errc::invalid_argument,
               "crossentropy_backward_16bit: no logits");
  OpWork work = floats_moved(3.0 * N);
  work.bytes += (logits16 ? 2.0 : 4.0) * N * V + 2.0 * N * ld;
  const OpProfile::Span span = begin_op("crossentropy_backward_16bit", work);
  cuda::crossentropy_backward_16bit(stream_, dlogits16, gemm_operands_ == DType::bf16, logits,
                                    logits16, lse, targets, dlosses, N, V, ld, vocab_start);
}

namespace {
// AdamW's bias corrections in double on the host, exactly as the CPU kernel computes them.
float bias_correction(float beta, int step) {
  return static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta), step)));
}
}  // namespace

void CudaDevice::adamw(float* param, const float* grad, float* m, float* v, std::int64_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       int step, float grad_scale) {
  const OpProfile::Span span = begin_op("adamw", floats_moved(7.0 * n));
  cuda::adamw(stream_, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
              bias_correction(beta1, step), bias_correction(beta2, step), grad_scale);
}
void CudaDevice::adamw_ranges(float* param, const float* grad, float* m, float* v,
                              const AdamWRange* ranges, std::size_t count, float lr, float beta1,
                              float beta2, float eps, int step, float grad_scale) {
  double n = 0;
  for (std::size_t i = 0; i < count; ++i) n += static_cast<double>(ranges[i].n);
  const OpProfile::Span span = begin_op("adamw", floats_moved(7.0 * n));
  cuda::adamw_ranges(stream_, param, grad, m, v, ranges, count, lr, beta1, beta2, eps,
                     bias_correction(beta1, step), bias_correction(beta2, step), grad_scale);
}
void CudaDevice::sgd(float* param, const float* grad, float* mom, std::int64_t n, float lr,
                     float momentum, float weight_decay, float grad_scale) {
  const OpProfile::Span span = begin_op(
      "sgd", floats_moved((mom != nullptr && momentum != 0.0f ? 5.0 : 3.0) * n));
  cuda::sgd(stream_, param, grad, mom, n, lr, momentum, weight_decay, grad_scale);
}

}  // namespace dtrain::cuda
