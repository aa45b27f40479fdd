// CpuDevice forwards each op to its fp32 kernel; memory comes from AlignedBuffer.
#include "device/cpu/cpu_device.hpp"

#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "device/cpu/kernels.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {

CpuDevice::CpuDevice()
    : attention_saves_(env::params().cpu_attention_probabilities ? cpu::AttentionSaved::probabilities
                                                                  : cpu::AttentionSaved::log_sum_exp) {
  const int n = env::params().num_threads;  // DTRAIN_NUM_THREADS, 0 = library defaults
  if (n > 0) set_num_threads(n);
}

namespace {
// Said once per process: training steps ran about twice as slow (docs/performance.md).
void warn_if_thread_pools_compete(int threads) {
  static bool said = false;
  if (said || threads <= 1 || !cpu::blas_threads_compete()) return;
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy && strcasecmp(policy, "passive") == 0) return;
  said = true;
  DTRAIN_LOG(warn, "OpenBLAS runs its own threads beside the OpenMP threads of the CPU kernels "
                   "and the two compete for the cores: build against OpenBLAS's OpenMP variant "
                   "(Debian: libopenblas-openmp-dev) or set OMP_WAIT_POLICY=passive");
}
}  // namespace

std::string CpuDevice::name() const { return "cpu (OpenBLAS)"; }
void CpuDevice::set_num_threads(int n) {
  cpu::set_num_threads(n);
  warn_if_thread_pools_compete(n);
}
int CpuDevice::num_threads() const { return cpu::num_threads(); }

void* CpuDevice::allocate(std::size_t bytes) {
  if (bytes == 0) bytes = AlignedBuffer::kAlignment;  // distinct, freeable pointer
  // Page-aligned from one page up, so discard() can hand whole pages back. Large blocks
  // (arenas, activations) are faulted in where they are first written: a ZeRO-3 rank never
  // touches the parameter and gradient pieces it does not own outside a pass.
  AlignedBuffer buf(bytes, bytes >= kPage ? kPage : AlignedBuffer::kAlignment,
                    bytes >= kLazyBytes ? Faulting::on_use : Faulting::now);
  void* p = buf.data();
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_.emplace(static_cast<const char*>(p), std::move(buf));
  return p;
}

void CpuDevice::free(void* ptr) noexcept {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_.erase(static_cast<const char*>(ptr));
}

bool CpuDevice::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto after = blocks_.upper_bound(c);  // the first block starting beyond p
  if (after == blocks_.begin()) return false;
  const auto& [start, buf] = *std::prev(after);
  return c < start + buf.bytes();
}

void CpuDevice::copy(void* dst, const void* src, std::size_t bytes, CopyKind) {
  if (bytes) std::memmove(dst, src, bytes);
}
void CpuDevice::zero(void* ptr, std::size_t bytes) {
  if (bytes) std::memset(ptr, 0, bytes);
}

std::size_t CpuDevice::available_memory() const {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

void CpuDevice::discard(void* ptr, std::size_t bytes) {
  // Whole pages go back to the kernel (private anonymous memory reads as zero afterwards);
  // the partial pages at either end are zeroed in place.
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(ptr);
  const std::uintptr_t last = first + bytes;
  const std::uintptr_t lo = (first + page - 1) / page * page;
  const std::uintptr_t hi = last / page * page;
  if (lo >= hi) {
    zero(ptr, bytes);
    return;
  }
  zero(ptr, lo - first);
  zero(reinterpret_cast<void*>(hi), last - hi);
  // No transparent huge pages here: khugepaged could fill the dropped pages back in.
  void* pages = reinterpret_cast<void*>(lo);
  madvise(pages, hi - lo, MADV_NOHUGEPAGE);  // best effort; DONTNEED below is what matters
  if (madvise(pages, hi - lo, MADV_DONTNEED) != 0) {
    zero(reinterpret_cast<void*>(lo), hi - lo);  // still correct, only not smaller
  }
}

void CpuDevice::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc) {
  cpu::gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void CpuDevice::gemm_strided_batched(bool ta, bool tb, int M, int N, int K, float alpha,
                                     const float* A, int lda, std::int64_t sa, const float* B,
                                     int ldb, std::int64_t sb, float beta, float* C, int ldc,
                                     std::int64_t sc, int batch) {
  cpu::gemm_strided_batched<float>(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc,
                                   sc, batch);
}
// inp16 and dout16 are never read: the CPU multiplies fp32 (gemm_operand_format).
void CpuDevice::linear_forward(float* out, const float* inp, const float* weight,
                               const float* bias, int N, int C, int OC,
                               const std::uint16_t* /*inp16*/, std::uint16_t* out16) {
  DTRAIN_CHECK(!out16, Errc::invalid_argument,
               "linear_forward: the CPU has no 16-bit GEMM operands to round copies to");
  cpu::linear_forward<float>(out, inp, weight, bias, N, C, OC);
}
void CpuDevice::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, int N, int C, int OC,
                                GradWrite dinp_write, const std::uint16_t* /*inp16*/,
                                const std::uint16_t* /*dout16*/, std::uint16_t* dinp16) {
  DTRAIN_CHECK(N == 0 || ((inp || !dweight) && dout), Errc::invalid_argument,
               "linear_backward: the CPU needs the fp32 input and output gradient");
  DTRAIN_CHECK(!dinp16, Errc::invalid_argument,
               "linear_backward: the CPU has no 16-bit GEMM operands to write dinp16 in");
  cpu::linear_backward<float>(dinp, dweight, dbias, dout, inp, weight, N, C, OC,
                              dinp_write == GradWrite::accumulate);
}
void CpuDevice::embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int N,
                                  int C, int vocab_start, int vocab_rows) {
  cpu::embedding_forward<float>(out, tokens, wte, N, C, vocab_start, vocab_rows);
}
void CpuDevice::embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens,
                                   int N, int C, int vocab_start, int vocab_rows) {
  cpu::embedding_backward<float>(dwte, dout, tokens, N, C, vocab_start, vocab_rows);
}
void CpuDevice::positional_forward(float* out, const float* wpe, int B, int T, int C) {
  cpu::positional_forward<float>(out, wpe, B, T, C);
}
void CpuDevice::positional_backward(float* dwpe, const float* dout, int B, int T, int C) {
  cpu::positional_backward<float>(dwpe, dout, B, T, C);
}
void CpuDevice::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C,
                                  std::uint16_t* out16) {
  DTRAIN_CHECK(!out16, Errc::invalid_argument,
               "layernorm_forward: the CPU has no 16-bit GEMM operands to round copies to");
  cpu::layernorm_forward<float>(out, mean, rstd, inp, weight, bias, N, C);
}
void CpuDevice::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, int N, int C,
                                   const std::uint16_t* /*dout16*/) {
  DTRAIN_CHECK(N <= 0 || C <= 0 || dout, Errc::invalid_argument,
               "layernorm_backward: the CPU needs the fp32 output gradient");
  cpu::layernorm_backward<float>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void CpuDevice::gelu_forward(float* out, const float* inp, std::int64_t n, std::uint16_t* inp16,
                             std::uint16_t* out16) {
  DTRAIN_CHECK(!inp16 && !out16, Errc::invalid_argument,
               "gelu_forward: the CPU has no 16-bit GEMM operands to round copies to");
  cpu::gelu_forward<float>(out, inp, n);
}
void CpuDevice::gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                              GradWrite dinp_write, const std::uint16_t* /*inp16: fp32 here*/) {
  DTRAIN_CHECK(n == 0 || inp, Errc::invalid_argument, "gelu_backward: the CPU needs the fp32 input");
  cpu::gelu_backward<float>(dinp, inp, dout, n, dinp_write == GradWrite::accumulate);
}
void CpuDevice::attention_forward(float* out, float* att, float* workspace, const float* qkv,
                                  int B, int T, int C, int NH, const std::uint16_t*,
                                  std::uint16_t* out16) {
  DTRAIN_CHECK(!out16, Errc::invalid_argument,
               "attention_forward: the CPU has no 16-bit GEMM operands to round copies to");
  cpu::attention_forward<float>(out, att, workspace, qkv, B, T, C, NH, attention_saves_);
}
void CpuDevice::attention_backward(float* dqkv, float* workspace, const float* dout,
                                   const float* qkv, const float*, const float* att, int B,
                                   int T, int C, int NH, GradWrite dqkv_write,
                                   const std::uint16_t*, const std::uint16_t*,
                                   const std::uint16_t*) {
  DTRAIN_CHECK(qkv && dout, Errc::invalid_argument,
               "attention_backward: the CPU needs the fp32 qkv and dout");
  cpu::attention_backward<float>(dqkv, workspace, dout, qkv, att, B, T, C, NH, attention_saves_,
                                 0, dqkv_write == GradWrite::accumulate);
}
std::size_t CpuDevice::attention_workspace_floats(int T) const {
  return cpu::attention_workspace_elems(T);
}
std::size_t CpuDevice::attention_saved_floats(int B, int T, int, int NH) const {
  return cpu::attention_saved_elems(attention_saves_, B, T, NH);
}
void CpuDevice::attention_decode(float* out, float* workspace, const float* q, const float* k,
                                 const float* v, int T, int C, int NH, int ld) {
  cpu::attention_decode(out, workspace, q, k, v, T, C, NH, ld);
}
void CpuDevice::residual_forward(float* out, const float* a, const float* b, std::int64_t n) {
  cpu::residual_forward<float>(out, a, b, n);
}
void CpuDevice::accumulate(float* dst, const float* src, std::int64_t n) {
  cpu::accumulate<float>(dst, src, n);
}
void CpuDevice::scale(float* x, float s, std::int64_t n) { cpu::scale<float>(x, s, n); }
void CpuDevice::fill(float* x, float value, std::int64_t n) { cpu::fill<float>(x, value, n); }
void CpuDevice::copy_floats(float* dst, const float* src, std::int64_t n) {
  cpu::copy<float>(dst, src, n);
}
double CpuDevice::sum_squares(const float* x, std::int64_t n) {
  return cpu::sum_squares<float>(x, n);
}
void CpuDevice::convert_to_16bit(std::uint16_t* dst, const float* src, std::int64_t n,
                                 DType fmt) {
  if (check_16bit_format(fmt, "convert_to_16bit") == DType::bf16) {
    cpu::convert_to_bf16(dst, src, n);
  } else {
    cpu::convert_to_f16(dst, src, n);
  }
}
void CpuDevice::convert_from_16bit(float* dst, const std::uint16_t* src, std::int64_t n,
                                   DType fmt) {
  if (check_16bit_format(fmt, "convert_from_16bit") == DType::bf16) {
    cpu::convert_from_bf16(dst, src, n);
  } else {
    cpu::convert_from_f16(dst, src, n);
  }
}
void CpuDevice::round_to_16bit(float* dst, const float* src, std::int64_t n, DType fmt) {
  if (check_16bit_format(fmt, "round_to_16bit") == DType::bf16) {
    cpu::round_to_bf16(dst, src, n);
  } else {
    cpu::round_to_f16(dst, src, n);
  }
}
bool CpuDevice::any_nonfinite(const float* x, std::int64_t n) { return cpu::any_nonfinite(x, n); }
void CpuDevice::crossentropy_forward(float* losses, float* lse, const float* logits,
                                     const std::int32_t* targets, int N, int V, int Vp) {
  cpu::crossentropy_forward<float>(losses, lse, logits, targets, N, V, Vp);
}
void CpuDevice::crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                      const std::int32_t* targets, const float* dlosses, int N,
                                      int V, int Vp) {
  cpu::crossentropy_backward<float>(dlogits, logits, lse, targets, dlosses, N, V, Vp);
}
void CpuDevice::crossentropy_shard_stats(float* max, float* target_logit, const float* logits,
                                         const std::int32_t* targets, int N, int V, int ld,
                                         int vocab_start) {
  cpu::crossentropy_shard_stats<float>(max, target_logit, logits, targets, N, V, ld,
                                       vocab_start);
}
void CpuDevice::crossentropy_shard_sumexp(float* sumexp, const float* logits, const float* max,
                                          int N, int V, int ld) {
  cpu::crossentropy_shard_sumexp<float>(sumexp, logits, max, N, V, ld);
}
void CpuDevice::crossentropy_shard_finish(float* losses, float* lse, const float* max,
                                          const float* sumexp, const float* target_logit,
                                          int N) {
  cpu::crossentropy_shard_finish<float>(losses, lse, max, sumexp, target_logit, N);
}
void CpuDevice::crossentropy_shard_backward(float* dlogits, const float* logits,
                                            const float* lse, const std::int32_t* targets,
                                            const float* dlosses, int N, int V, int ld,
                                            int vocab_start) {
  cpu::crossentropy_shard_backward<float>(dlogits, logits, lse, targets, dlosses, N, V, ld,
                                          vocab_start);
}
void CpuDevice::adamw(float* param, const float* grad, float* m, float* v, std::int64_t n,
                      float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                      float grad_scale) {
  cpu::adamw<float>(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
}
void CpuDevice::sgd(float* param, const float* grad, float* mom, std::int64_t n, float lr,
                    float momentum, float weight_decay, float grad_scale) {
  cpu::sgd<float>(param, grad, mom, n, lr, momentum, weight_decay, grad_scale);
}

Device& cpu_device() {
  static CpuDevice device;  // constructed on first use, thread-safe (C++11 statics)
  return device;
}

}  // namespace dtrain
