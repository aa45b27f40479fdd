// Causal multi-head self-attention. Under 16-bit GEMM operands and head sizes 16, 32, 48 or
// 64, the fused kernels of flash_attention.cu, which save one log-sum-exp per row. Otherwise (and
// under DTRAIN_CUDA_FUSED_ATTENTION=0): per sequence and group of heads, strided-batched cuBLAS
// GEMMs over the group's heads at once (head h's Q, K, V are column blocks hs apart in qkv
// rows of 3C) around the fused causal softmax kernel. A group's score matrices fit in half
// the L2 (attention_heads_per_group), so the softmax and the GEMM after it find them there
// instead of in device memory. The probabilities are saved in att[B,NH,T,T] with a zero upper
// triangle, as on the CPU; GEMMs cover the full T x T (the masked half multiplies zeros).
#include <algorithm>
#include <cmath>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {

bool CudaDevice::fused_attention(int C, int NH) const noexcept {
  return fused_attention_ && flash_attention_supports(gemm_operands_, C, NH);
}

std::size_t CudaDevice::attention_saved_floats(int B, int T, int C, int NH) const {
  if (fused_attention(C, NH)) return flash_attention_saved_floats(B, T, NH);
  return Device::attention_saved_floats(B, T, C, NH);
}

int CudaDevice::attention_heads_per_group(int T, int NH) const noexcept {
  const std::size_t per_head = sizeof(float) * static_cast<std::size_t>(T) * T;
  const std::size_t fit = l2_bytes_ / 2 / per_head;
  return static_cast<int>(std::clamp<std::size_t>(fit, 1, static_cast<std::size_t>(NH)));
}

// The workspace is not used: the scores live in att (or, fused, in registers). The fused
// kernels read a caller's qkv16 as it is and write out16 as they write out; the GEMMs take
// qkv (widened from qkv16 into the scratch where it is null), and out16 is rounded from out
// after them (from the scratch where out is null).
void CudaDevice::attention_forward(float* out, float* att, float*, const float* qkv, int B, int T,
                                   int C, int NH, const std::uint16_t* qkv16,
                                   std::uint16_t* out16) {
  DTRAIN_CHECK(!out16 || gemm_operands_ != DType::f32, Errc::invalid_argument,
               "attention_forward: a 16-bit copy needs 16-bit GEMM operands");
  DTRAIN_CHECK(out || out16, Errc::invalid_argument, "attention_forward: no output");
  DTRAIN_CHECK(qkv || readable(qkv16), Errc::invalid_argument,
               "attention_forward: no qkv (a 16-bit one serves only under 16-bit GEMM operands)");
  if (B <= 0 || T <= 0 || NH <= 0) return;
  if (fused_attention(C, NH)) {  // its own row in the profile
    const OpProfile::Span span = begin_op(
        "flash_attention_forward", attention_work(false, kFlashAttentionBlockRows, B, T, C, NH));
    flash_attention_forward(stream_, gemm_operands_, out, out16, att, qkv, readable(qkv16), B, T,
                            C, NH);
    return;
  }
  const OpProfile::Span span = begin_op(
      "attention_forward", attention_work(false, 0, B, T, C, NH));
  const std::int64_t out_floats = static_cast<std::int64_t>(B) * T * C;
  const std::int64_t qkv_floats = qkv ? 0 : 3 * out_floats;
  float* work = scratch(static_cast<std::size_t>((out ? 0 : out_floats) + qkv_floats));
  if (!qkv) {
    cuda::convert_from_16bit(stream_, work, qkv16, qkv_floats, gemm_operands_ == DType::bf16);
    qkv = work;
  }
  if (!out) out = work + qkv_floats;  // only out16 is kept
  const int hs = C / NH, C3 = 3 * C, G = attention_heads_per_group(T, NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t TT = static_cast<std::int64_t>(T) * T;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; h += G) {
      const int n = std::min(G, NH - h);
      const float* base = qkv + static_cast<std::int64_t>(b) * T * C3 + h * hs;
      float* P = att + (static_cast<std::int64_t>(b) * NH + h) * TT;
      // S[h] = scale * Q[h] · K[h]^T
      gemm_strided_batched(false, true, T, T, hs, scale, base, C3, hs, base + C, C3, hs, 0.0f, P,
                           T, TT, n);
      causal_softmax_forward(stream_, P, n, T);
      // Y[h] = P[h] · V[h], written into head h's column block of out
      gemm_strided_batched(false, false, T, hs, T, 1.0f, P, T, TT, base + 2 * C, C3, hs, 0.0f,
                           out + static_cast<std::int64_t>(b) * T * C + h * hs, C, hs, n);
    }
  }
  if (out16) cuda::convert_to_16bit(stream_, out16, out, out_floats, gemm_operands_ == DType::bf16);
}

// The caller's workspace (T x T) is not used: the GEMMs run over a group of heads at once,
// so their score gradients live in the device's own scratch (group x T x T floats).
// One query row against the cache: reads its keys and values once, plus q and out. The
// blocks' shares of the softmax go to the device scratch, not the caller's workspace.
void CudaDevice::attention_decode(float* out, float*, const float* q, const float* k,
                                  const float* v, int T, int C, int NH, int ld) {
  const OpProfile::Span span = begin_op(
      "attention_decode", {4.0 * T * C, 4.0 * (2.0 * T * C + 2.0 * C)});
  cuda::attention_decode(stream_, out, scratch(attention_decode_partial_floats(T, C, NH)), q, k,
                         v, T, C, NH, ld);
}

// A caller's qkv16 / out16 / dout16 (16-bit operands only): the fused kernels read them as
// they are; the GEMMs here take qkv and dout widened into the scratch after the score
// gradients (out unused).
void CudaDevice::attention_backward(float* dqkv, float*, const float* dout, const float* qkv,
                                    const float* out, const float* att, int B, int T, int C,
                                    int NH, GradWrite dqkv_write, const std::uint16_t* qkv16,
                                    const std::uint16_t* out16, const std::uint16_t* dout16) {
  if (B <= 0 || T <= 0 || NH <= 0) return;
  const bool accumulate = dqkv_write == GradWrite::accumulate;
  const AttentionInput in{qkv, readable(qkv16), out, readable(out16)};
  dout16 = readable(dout16);
  DTRAIN_CHECK((in.qkv || in.qkv16) && (in.out || in.out16 || !fused_attention(C, NH)) &&
                   (dout || dout16),
               Errc::invalid_argument,
               "attention_backward: no qkv, out or dout (16-bit ones serve only under 16-bit "
               "GEMM operands)");
  if (fused_attention(C, NH)) {
    OpWork work = attention_work(true, kFlashAttentionBlockRows, B, T, C, NH, accumulate);
    if (dout16) work.bytes -= 2.0 * B * T * C;  // dout in words
    const OpProfile::Span span = begin_op("flash_attention_backward", work);
    float* floats = scratch(flash_attention_backward_scratch_floats(B, T, C, NH));
    flash_attention_backward(stream_, gemm_operands_, dqkv, floats, dout16 ? nullptr : dout,
                             dout16, in, att, B, T, C, NH, accumulate);
    return;
  }
  const OpProfile::Span span = begin_op(
      "attention_backward", attention_work(true, 0, B, T, C, NH, accumulate));
  // Each of dQ, dK and dV of a group of heads is one GEMM's output: beta 0 writes it over.
  const float beta = accumulate ? 1.0f : 0.0f;
  const int hs = C / NH, C3 = 3 * C, G = attention_heads_per_group(T, NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t TT = static_cast<std::int64_t>(T) * T;
  const std::size_t dP_floats = static_cast<std::size_t>(G) * static_cast<std::size_t>(TT);
  const std::int64_t qkv_floats = static_cast<std::int64_t>(B) * T * C3;
  const std::int64_t dout_floats = dout16 ? static_cast<std::int64_t>(B) * T * C : 0;
  const bool widen = qkv == nullptr;  // then qkv16 is there (checked above)
  float* dP = scratch(dP_floats + (widen ? static_cast<std::size_t>(qkv_floats) : 0) +
                      static_cast<std::size_t>(dout_floats));
  const bool bf16 = gemm_operands_ == DType::bf16;
  float* widened = dP + dP_floats;
  if (widen) {
    cuda::convert_from_16bit(stream_, widened, in.qkv16, qkv_floats, bf16);
    qkv = widened;
    widened += qkv_floats;
  }
  if (dout16) {
    cuda::convert_from_16bit(stream_, widened, dout16, dout_floats, bf16);
    dout = widened;
  }
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; h += G) {
      const int n = std::min(G, NH - h);
      const std::int64_t row = static_cast<std::int64_t>(b) * T * C3 + h * hs;
      const float* base = qkv + row;
      float* dbase = dqkv + row;
      const float* P = att + (static_cast<std::int64_t>(b) * NH + h) * TT;
      const float* dY = dout + static_cast<std::int64_t>(b) * T * C + h * hs;
      // dP[h] = dY[h] · V[h]^T
      gemm_strided_batched(false, true, T, T, hs, 1.0f, dY, C, hs, base + 2 * C, C3, hs, 0.0f,
                           dP, T, TT, n);
      // dV[h] += P[h]^T · dY[h]
      gemm_strided_batched(true, false, T, hs, T, 1.0f, P, T, TT, dY, C, hs, beta,
                           dbase + 2 * C, C3, hs, n);
      // dS = softmax backward, with the forward's 1/sqrt(hs) folded in
      causal_softmax_backward(stream_, dP, P, n, T, scale);
      // dQ[h] += dS[h] · K[h];  dK[h] += dS[h]^T · Q[h]
      gemm_strided_batched(false, false, T, hs, T, 1.0f, dP, T, TT, base + C, C3, hs, beta,
                           dbase, C3, hs, n);
      gemm_strided_batched(true, false, T, hs, T, 1.0f, dP, T, TT, base, C3, hs, beta,
                           dbase + C, C3, hs, n);
    }
  }
}

// The fused kernels only: the unfused path's GEMMs write fp32 (the caller then rounds).
bool CudaDevice::attention_backward_rounded(std::uint16_t* dqkv16, float* dbias, float*,
                                            const float* dout, const float* att, int B, int T,
                                            int C, int NH, const std::uint16_t* qkv16,
                                            const std::uint16_t* out16,
                                            const std::uint16_t* dout16) {
  if (!fused_attention(C, NH)) return false;
  DTRAIN_CHECK(qkv16 && out16 && dbias && (dout || dout16), Errc::invalid_argument,
               "attention_backward_rounded: needs qkv16, out16, dout or dout16, and dbias");
  if (B <= 0 || T <= 0 || NH <= 0) return true;
  OpWork work = attention_work(true, kFlashAttentionBlockRows, B, T, C, NH, false);
  work.bytes -= 2.0 * B * T * (3 * C + (dout16 ? C : 0));  // dqkv (and dout) in 16-bit words
  const OpProfile::Span span = begin_op("flash_attention_backward", work);
  const AttentionInput in{nullptr, qkv16, nullptr, out16};
  float* floats = scratch(flash_attention_backward_rounded_scratch_floats(B, T, C, NH));
  flash_attention_backward_rounded(stream_, gemm_operands_, dqkv16, dbias, floats,
                                   dout16 ? nullptr : dout, dout16, in, att, B, T, C, NH);
  return true;
}

std::size_t CudaDevice::attention_workspace_floats(int) const { return 0; }

}  // namespace dtrain::cuda
