// Causal multi-head self-attention: per sequence, strided-batched cuBLAS GEMMs over all heads
// at once (head h's Q, K, V are column blocks hs apart in qkv rows of 3C) around the fused
// causal softmax kernel. The probabilities are saved in att[B,NH,T,T] with a zero upper
// triangle, as on the CPU; GEMMs cover the full T x T (the masked half multiplies zeros).
#include <cmath>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/kernels.hpp"

namespace dtrain::cuda {

void CudaDevice::attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                                   int NH) {
  if (B <= 0 || T <= 0 || NH <= 0) return;
  const OpProfile::Span span = begin_op("attention_forward");
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t TT = static_cast<std::int64_t>(T) * T;
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<std::int64_t>(b) * T * C3;
    float* P = att + static_cast<std::int64_t>(b) * NH * TT;
    // S[h] = scale * Q[h] · K[h]^T
    gemm_strided_batched(false, true, T, T, hs, scale, base, C3, hs, base + C, C3, hs, 0.0f, P,
                         T, TT, NH);
  }
  causal_softmax_forward(stream_, att, static_cast<std::int64_t>(B) * NH, T);
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<std::int64_t>(b) * T * C3;
    const float* P = att + static_cast<std::int64_t>(b) * NH * TT;
    // Y[h] = P[h] · V[h], written into head h's column block of out
    gemm_strided_batched(false, false, T, hs, T, 1.0f, P, T, TT, base + 2 * C, C3, hs, 0.0f,
                         out + static_cast<std::int64_t>(b) * T * C, C, hs, NH);
  }
}

// The caller's workspace (T x T) is not used: the GEMMs run over all NH heads of a sequence
// at once, so their score gradients live in the device's own scratch (NH x T x T floats).
void CudaDevice::attention_backward(float* dqkv, float*, const float* dout, const float* qkv,
                                    const float* att, int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || NH <= 0) return;
  const OpProfile::Span span = begin_op("attention_backward");
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::int64_t TT = static_cast<std::int64_t>(T) * T;
  float* dP = scratch(static_cast<std::size_t>(NH) * static_cast<std::size_t>(TT));
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<std::int64_t>(b) * T * C3;
    float* dbase = dqkv + static_cast<std::int64_t>(b) * T * C3;
    const float* P = att + static_cast<std::int64_t>(b) * NH * TT;
    const float* dY = dout + static_cast<std::int64_t>(b) * T * C;
    // dP[h] = dY[h] · V[h]^T
    gemm_strided_batched(false, true, T, T, hs, 1.0f, dY, C, hs, base + 2 * C, C3, hs, 0.0f, dP,
                         T, TT, NH);
    // dV[h] += P[h]^T · dY[h]
    gemm_strided_batched(true, false, T, hs, T, 1.0f, P, T, TT, dY, C, hs, 1.0f, dbase + 2 * C,
                         C3, hs, NH);
    // dS = softmax backward, with the forward's 1/sqrt(hs) folded in
    causal_softmax_backward(stream_, dP, P, NH, T, scale);
    // dQ[h] += dS[h] · K[h];  dK[h] += dS[h]^T · Q[h]
    gemm_strided_batched(false, false, T, hs, T, 1.0f, dP, T, TT, base + C, C3, hs, 1.0f, dbase,
                         C3, hs, NH);
    gemm_strided_batched(true, false, T, hs, T, 1.0f, dP, T, TT, base, C3, hs, 1.0f, dbase + C,
                         C3, hs, NH);
  }
}

std::size_t CudaDevice::attention_workspace_floats(int) const { return 0; }

}  // namespace dtrain::cuda
