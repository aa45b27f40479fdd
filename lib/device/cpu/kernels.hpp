#pragma once
// CPU op kernels: free functions over raw pointers + sizes, row-major, templated on the
// element type. float backs CpuDevice; double exists so finite-difference tests can check
// the gradients to ~1e-8. Backward kernels accumulate (+=) into every gradient they touch.
#include <cstddef>
#include <cstdint>

namespace dtrain::cpu {

// ---- gemm.cpp ----------------------------------------------------------------
// C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* B, int ldb, T beta, T* C, int ldc);
template <class T>
void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A,
                          int lda, std::int64_t stride_a, const T* B, int ldb,
                          std::int64_t stride_b, T beta, T* C, int ldc, std::int64_t stride_c,
                          int batch);

// ---- linear.cpp --------------------------------------------------------------
// out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp[N,C] += dout[N,OC]·weight[OC,C]; dweight[OC,C] += dout^T·inp; dbias[OC] += sum_n dout
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC, bool accumulate_dinp = true);

// ---- embedding.cpp -----------------------------------------------------------
// out[N,C] = wte[tok - vocab_start] (rows outside [vocab_start, vocab_start+vocab_rows) -> 0)
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, int N, int C,
                       int vocab_start, int vocab_rows);
template <class T>
void embedding_backward(T* dwte, const T* dout, const std::int32_t* tokens, int N, int C,
                        int vocab_start, int vocab_rows);
// out[B,T,C] += wpe[T,C]
template <class T> void positional_forward(T* out, const T* wpe, int B, int T_, int C);
// dwpe[T,C] += sum_b dout[b,T,C]
template <class T> void positional_backward(T* dwpe, const T* dout, int B, int T_, int C);

// ---- layernorm.cpp -----------------------------------------------------------
constexpr double kLayerNormEps = 1e-5;
// out[N,C], mean[N], rstd[N] <- inp[N,C], weight[C], bias[C]
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int N, int C);

// ---- gelu.cpp ----------------------------------------------------------------
// out[n] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T> void gelu_forward(T* out, const T* inp, std::int64_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n, bool accumulate = true);

// ---- attention.cpp -----------------------------------------------------------
// The block arguments below are query rows per GEMM block; 0 is the default (attention.cpp).
// What forward saves for backward: the probabilities, saved[B,NH,T,T] (upper triangle zero),
// or per query row its log-sum-exp as two values (head + rest), saved[B,NH,T,2], from which
// backward recomputes the probabilities.
enum class AttentionSaved { probabilities, log_sum_exp };
std::size_t attention_saved_elems(AttentionSaved what, int B, int T_, int NH);
// The workspace both directions take: two row blocks of T_ (padded rows; forward uses one,
// and none when saving probabilities).
std::size_t attention_workspace_elems(int T_, int block = 0);
// qkv[B,T,3C] -> out[B,T,C] = causal softmax(q k^T / sqrt(hs)) v per head, hs = C/NH
template <class T>
void attention_forward(T* out, T* saved, T* workspace, const T* qkv, int B, int T_, int C, int NH,
                       AttentionSaved what, int block = 0);
// dqkv[B,T,3C] += (= unless accumulate) from dout[B,T,C] and what forward saved
template <class T>
void attention_backward(T* dqkv, T* workspace, const T* dout, const T* qkv, const T* saved, int B,
                        int T_, int C, int NH, AttentionSaved what, int block = 0,
                        bool accumulate = true);

// ---- attention_decode.cpp ----------------------------------------------------
// One query row q[C] against keys k[T_,ld] and values v[T_,ld] (Device::attention_decode);
// workspace holds NH*T_ floats.
void attention_decode(float* out, float* workspace, const float* q, const float* k,
                      const float* v, int T_, int C, int NH, int ld);

// ---- elementwise.cpp ---------------------------------------------------------
template <class T> void residual_forward(T* out, const T* a, const T* b, std::int64_t n);
template <class T> void accumulate(T* dst, const T* src, std::int64_t n);
template <class T> void scale(T* x, T s, std::int64_t n);
template <class T> void fill(T* x, T value, std::int64_t n);
template <class T> void copy(T* dst, const T* src, std::int64_t n);
template <class T> double sum_squares(const T* x, std::int64_t n);

// ---- cast.cpp ----------------------------------------------------------------
// Round to nearest even; f16 overflow -> inf; NaN stays NaN. dst may equal src for round_*.
void convert_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n);
void convert_to_f16(std::uint16_t* dst, const float* src, std::int64_t n);
void convert_from_bf16(float* dst, const std::uint16_t* src, std::int64_t n);
void convert_from_f16(float* dst, const std::uint16_t* src, std::int64_t n);
void round_to_bf16(float* dst, const float* src, std::int64_t n);
void round_to_f16(float* dst, const float* src, std::int64_t n);
bool any_nonfinite(const float* x, std::int64_t n);

// ---- crossentropy.cpp --------------------------------------------------------
// logits[N,Vp] (real vocab V <= Vp), targets[N] -> losses[N], lse[N]
template <class T>
void crossentropy_forward(T* losses, T* lse, const T* logits, const std::int32_t* targets, int N,
                          int V, int Vp);
// dlogits[N,Vp] = (softmax - onehot) * dlosses[n]; padding columns 0; may alias logits
template <class T>
void crossentropy_backward(T* dlogits, const T* logits, const T* lse,
                           const std::int32_t* targets, const T* dlosses, int N, int V, int Vp);

// ---- crossentropy_shard.cpp --------------------------------------------------
// A vocabulary shard: logits[N,ld] whose first V columns are tokens [vocab_start, +V).
// max[n] over the V columns (-inf when V == 0); target_logit[n] = the target's logit when
// this shard owns it, else 0.
template <class T>
void crossentropy_shard_stats(T* max, T* target_logit, const T* logits,
                              const std::int32_t* targets, int N, int V, int ld,
                              int vocab_start);
// sumexp[n] = sum_{j<V} exp(logits[n,j] - max[n]) with max already reduced over shards
template <class T>
void crossentropy_shard_sumexp(T* sumexp, const T* logits, const T* max, int N, int V, int ld);
// lse = max + log(sumexp); losses = lse - target_logit (all reduced over shards)
template <class T>
void crossentropy_shard_finish(T* losses, T* lse, const T* max, const T* sumexp,
                               const T* target_logit, int N);
// dlogits[N,ld] = (softmax - onehot) * dlosses over this shard; padding 0; may alias logits
template <class T>
void crossentropy_shard_backward(T* dlogits, const T* logits, const T* lse,
                                 const std::int32_t* targets, const T* dlosses, int N, int V,
                                 int ld, int vocab_start);

// ---- optimizer.cpp -----------------------------------------------------------
template <class T>
void adamw(T* param, const T* grad, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2, T eps,
           T weight_decay, int step, T grad_scale);
template <class T>
void sgd(T* param, const T* grad, T* mom, std::int64_t n, T lr, T momentum, T weight_decay,
         T grad_scale);

// ---- threads.cpp -------------------------------------------------------------
void set_num_threads(int n);  // OpenMP + OpenBLAS
// Whether OpenBLAS runs a pool of its own threads (its pthreads build) beside the OpenMP
// threads of these kernels. Each pool spins a while before it sleeps, so with more than one
// thread per rank the two take the cores from each other.
bool blas_threads_compete();
int num_threads();

}  // namespace dtrain::cpu
