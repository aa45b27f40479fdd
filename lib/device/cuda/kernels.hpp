#pragma once
// Launchers of the CUDA kernels behind CudaDevice. Each mirrors the CPU kernel of the same
// name in lib/device/cpu/kernels.hpp: same shapes (row-major), same overwrite-or-accumulate
// rule, fp32 in and out. All are queued on `stream` and return at once.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dtrain/core/dtype.hpp"

namespace dtrain {
struct AdamWRange;  // dtrain/device/device.hpp
}

namespace dtrain::cuda {

// ---- kernels_elementwise.cu ------------------------------------------------------
void residual_forward(cudaStream_t s, float* out, const float* a, const float* b, std::int64_t n);
void accumulate(cudaStream_t s, float* dst, const float* src, std::int64_t n);  // dst += src
void scale(cudaStream_t s, float* x, float v, std::int64_t n);
void fill(cudaStream_t s, float* x, float v, std::int64_t n);
// C[i*ldc + j] *= beta for i < rows, j < cols, in `batch` matrices stride_c apart (the K == 0
// case of GEMM, which the CPU defines as scaling C).
void scale_matrix(cudaStream_t s, float* C, int rows, int cols, int ldc, float beta, int batch,
                  std::int64_t stride_c);
// out[n, j] = row[j] for n < N, j < C
void broadcast_rows(cudaStream_t s, float* out, const float* row, int N, int C);
// dst[c] += sum_n src[n, c]; scratch holds column_sum_scratch_floats(N, C) floats.
void column_sum_accumulate(cudaStream_t s, float* dst, const float* src, int N, int C,
                           float* scratch);
// The same sums, each src[n, c] also written into words[n, c] rounded to bf16 (or f16):
// one pass for a bias gradient and its output gradient's 16-bit GEMM operand.
void column_sum_accumulate_and_round(cudaStream_t s, float* dst, std::uint16_t* words,
                                     const float* src, int N, int C, bool bf16, float* scratch);
std::size_t column_sum_scratch_floats(int N, int C);
// *result = sum x[i]^2 accumulated in double; partials holds kSumSquaresPartials doubles.
constexpr int kSumSquaresPartials = 512;
void sum_squares(cudaStream_t s, double* result, double* partials, const float* x, std::int64_t n);
// sums[i] = sum of squares of x[starts[i], starts[i] + lengths[i]) (device arrays), one block
// per run.
void sum_squares_runs(cudaStream_t s, double* sums, const float* x, const std::int64_t* starts,
                      const std::int64_t* lengths, std::int64_t runs);

// ---- kernels_cast.cu -------------------------------------------------------------
// bf16 when `bf16`, else f16; rounding as device/half_bits.hpp. dst may equal src for round.
void convert_to_16bit(cudaStream_t s, std::uint16_t* dst, const float* src, std::int64_t n,
                      bool bf16);
void convert_from_16bit(cudaStream_t s, float* dst, const std::uint16_t* src, std::int64_t n,
                        bool bf16);
void round_to_16bit(cudaStream_t s, float* dst, const float* src, std::int64_t n, bool bf16);
// *flag (device int) = 1 when any x[i] is inf or NaN, else 0.
void any_nonfinite(cudaStream_t s, int* flag, const float* x, std::int64_t n);

// ---- kernels_embedding.cu --------------------------------------------------------
void embedding_forward(cudaStream_t s, float* out, const std::int32_t* tokens, const float* wte,
                       int N, int C, int vocab_start, int vocab_rows);
// Deterministic: positions are sorted by token and each row adds its positions in order.
std::size_t embedding_backward_workspace_bytes(int N);
void embedding_backward(cudaStream_t s, float* dwte, const float* dout,
                        const std::int32_t* tokens, int N, int C, int vocab_start,
                        int vocab_rows, void* workspace);
void positional_forward(cudaStream_t s, float* out, const float* wpe, int B, int T, int C);
void positional_backward(cudaStream_t s, float* dwpe, const float* dout, int B, int T, int C);

// ---- kernels_layernorm.cu --------------------------------------------------------
// out16 (or null): out rounded to bf16 (or f16) written there too.
void layernorm_forward(cudaStream_t s, float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C,
                       std::uint16_t* out16, bool bf16);
// dout16 (or null): dout as bf16 (or fp16) words, read instead; scratch holds
// layernorm_backward_scratch_floats(N, C) floats.
void layernorm_backward(cudaStream_t s, float* dinp, float* dweight, float* dbias,
                        const float* dout, const std::uint16_t* dout16, bool bf16,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, float* scratch);
std::size_t layernorm_backward_scratch_floats(int N, int C);

// ---- kernels_gelu.cu -------------------------------------------------------------
// inp16 / out16 (may be null): inp and out also rounded to bf16 (or fp16) words.
void gelu_forward(cudaStream_t s, float* out, const float* inp, std::int64_t n,
                  std::uint16_t* inp16 = nullptr, std::uint16_t* out16 = nullptr,
                  bool bf16 = true);
// out16 = gelu(inp16), bf16 (or fp16) words both ways.
void gelu_16bit(cudaStream_t s, std::uint16_t* out16, const std::uint16_t* inp16, std::int64_t n,
                bool bf16);
void gelu_backward(cudaStream_t s, float* dinp, const float* inp, const float* dout,
                   std::int64_t n, bool accumulate);
// dinp16[N, C] = the gradient from the input's words (written over), rounded to bf16 (or fp16)
// words, and dbias[C] += its column sums over the fp32 values, as column_sum_accumulate_and_round
// sums them; scratch holds column_sum_scratch_floats(N, C) floats. dout16 (or null): dout as
// words of the same format, read instead of dout.
void gelu_backward_rounded(cudaStream_t s, std::uint16_t* dinp16, float* dbias,
                           const std::uint16_t* inp16, const float* dout,
                           const std::uint16_t* dout16, int N, int C, bool bf16, float* scratch);
// The same from the input as bf16 (or fp16) words.
void gelu_backward_16bit(cudaStream_t s, float* dinp, const std::uint16_t* inp16, bool bf16,
                         const float* dout, std::int64_t n, bool accumulate);

// ---- kernels_softmax.cu ----------------------------------------------------------
// `matrices` score matrices [T,T] back to back: row t of each becomes the softmax of its
// entries 0..t, entries above the diagonal 0 (in place).
void causal_softmax_forward(cudaStream_t s, float* att, std::int64_t matrices, int T);
// dP <- P * (dP - rowsum(P * dP)) * scale over the causal part, 0 above the diagonal.
void causal_softmax_backward(cudaStream_t s, float* dP, const float* P, std::int64_t matrices,
                             int T, float scale);

// ---- kernels_attention_decode.cu --------------------------------------------------
// Device::attention_decode: q[C] against k[T,ld] and v[T,ld]; partial holds
// attention_decode_partial_floats(T, C, NH) floats (each block's share of the softmax).
std::size_t attention_decode_partial_floats(int T, int C, int NH);
void attention_decode(cudaStream_t s, float* out, float* partial, const float* q, const float* k,
                      const float* v, int T, int C, int NH, int ld);

// ---- flash_attention.cu ----------------------------------------------------------
// Fused causal attention on tensor cores, for bf16/fp16 operands (fmt) and head sizes 16,
// 32, 48 and 64. Saves per query row its log-sum-exp, in lse[B,NH,T,2] (two floats, so
// that 16-bit saved activations keep it to about 16 bits).
bool flash_attention_supports(DType fmt, int C, int NH);
// Query and key rows per block: the kernels compute every block on or below the diagonal whole.
constexpr int kFlashAttentionBlockRows = 64;
std::size_t flash_attention_saved_floats(int B, int T, int NH);
// qkv16 (or null): qkv in 16-bit words of fmt, read instead of qkv; out16 (or null): out
// rounded to fmt written there too.
void flash_attention_forward(cudaStream_t s, DType fmt, float* out, std::uint16_t* out16,
                             float* lse, const float* qkv, const std::uint16_t* qkv16, int B,
                             int T, int C, int NH);
// The forward's input and output as the backward reads them: the 16-bit words of fmt where
// that pointer is set (a kept copy: exactly what the fp32 values round to), else the fp32.
struct AttentionInput {
  const float* qkv = nullptr;
  const std::uint16_t* qkv16 = nullptr;
  const float* out = nullptr;
  const std::uint16_t* out16 = nullptr;
};
// dqkv += the gradient from dout (or dout16, dout as words of fmt, read instead), given the
// forward's qkv, out and lse; scratch holds flash_attention_backward_scratch_floats(B, T, C,
// NH) floats.
std::size_t flash_attention_backward_scratch_floats(int B, int T, int C, int NH);
void flash_attention_backward(cudaStream_t s, DType fmt, float* dqkv, float* scratch,
                              const float* dout, const std::uint16_t* dout16,
                              const AttentionInput& in, const float* lse, int B, int T, int C,
                              int NH, bool accumulate);
// The same gradient written over dqkv16, rounded to fmt, with its column sums (the fp32
// values') added into dbias[3C]; scratch holds
// flash_attention_backward_rounded_scratch_floats(B, T, C, NH) floats.
std::size_t flash_attention_backward_rounded_scratch_floats(int B, int T, int C, int NH);
void flash_attention_backward_rounded(cudaStream_t s, DType fmt, std::uint16_t* dqkv16,
                                      float* dbias, float* scratch, const float* dout,
                                      const std::uint16_t* dout16, const AttentionInput& in,
                                      const float* lse, int B, int T, int C, int NH);

// ---- kernels_crossentropy.cu -----------------------------------------------------
void crossentropy_forward(cudaStream_t s, float* losses, float* lse, const float* logits,
                          const std::int32_t* targets, int N, int V, int Vp);
// The same from logits as bf16 (or fp16) words.
void crossentropy_forward_16bit(cudaStream_t s, float* losses, float* lse,
                                const std::uint16_t* logits16, bool bf16,
                                const std::int32_t* targets, int N, int V, int Vp);
void crossentropy_backward(cudaStream_t s, float* dlogits, const float* logits, const float* lse,
                           const std::int32_t* targets, const float* dlosses, int N, int V,
                           int Vp);
void crossentropy_shard_stats(cudaStream_t s, float* max, float* target_logit,
                              const float* logits, const std::int32_t* targets, int N, int V,
                              int ld, int vocab_start);
void crossentropy_shard_sumexp(cudaStream_t s, float* sumexp, const float* logits,
                               const float* max, int N, int V, int ld);
void crossentropy_shard_finish(cudaStream_t s, float* losses, float* lse, const float* max,
                               const float* sumexp, const float* target_logit, int N);
void crossentropy_shard_backward(cudaStream_t s, float* dlogits, const float* logits,
                                 const float* lse, const std::int32_t* targets,
                                 const float* dlosses, int N, int V, int ld, int vocab_start);
// The same gradient rounded to bf16 (or fp16) words, from fp32 logits or from logits16, words
// of the same format (then null logits; dlogits16 may alias logits16).
void crossentropy_backward_16bit(cudaStream_t s, std::uint16_t* dlogits16, bool bf16,
                                 const float* logits, const std::uint16_t* logits16,
                                 const float* lse, const std::int32_t* targets,
                                 const float* dlosses, int N, int V, int ld, int vocab_start);

// ---- kernels_optimizer.cu --------------------------------------------------------
// c1 = 1/(1 - beta1^step), c2 = 1/(1 - beta2^step), computed on the host in double as the CPU does.
void adamw(cudaStream_t s, float* param, const float* grad, float* m, float* v, std::int64_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, float c1, float c2,
           float grad_scale);
// adamw over each range (Device::adamw_ranges), up to 32 ranges a launch.
void adamw_ranges(cudaStream_t s, float* param, const float* grad, float* m, float* v,
                  const AdamWRange* ranges, std::size_t count, float lr, float beta1, float beta2,
                  float eps, float c1, float c2, float grad_scale);
void sgd(cudaStream_t s, float* param, const float* grad, float* mom, std::int64_t n, float lr,
         float momentum, float weight_decay, float grad_scale);

}  // namespace dtrain::cuda
