#pragma once
// CpuDevice: the Device interface over the fp32 CPU kernels and OpenBLAS.
#include <map>
#include <mutex>

#include "device/cpu/kernels.hpp"
#include "dtrain/core/buffer.hpp"
#include "dtrain/device/device.hpp"

namespace dtrain {

class CpuDevice final : public Device {
 public:
  CpuDevice();

  DeviceKind kind() const noexcept override { return DeviceKind::cpu; }
  std::string name() const override;
  void set_num_threads(int n) override;
  int num_threads() const override;

  void* allocate(std::size_t bytes) override;
  void free(void* ptr) noexcept override;
  // Whether p points into a live allocation of this device. Lets tests run the device-buffer
  // communication path over CPU memory (comm::DeviceTransports).
  bool contains(const void* p) const;
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) override;
  void zero(void* ptr, std::size_t bytes) override;
  void discard(void* ptr, std::size_t bytes) override;
  bool discard_releases_memory() const noexcept override { return true; }
  std::size_t available_memory() const override;
  static constexpr std::size_t kPage = 4096;
  static constexpr std::size_t kLazyBytes = std::size_t{1} << 20;  // on_use from 1 MiB up
  void synchronize() override {}

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;
  void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                            const float* A, int lda, std::int64_t stride_a, const float* B,
                            int ldb, std::int64_t stride_b, float beta, float* C, int ldc,
                            std::int64_t stride_c, int batch) override;
  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC, const std::uint16_t* inp16,
                      std::uint16_t* out16) override;
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC,
                       GradWrite dinp_write, const std::uint16_t* inp16,
                       const std::uint16_t* dout16, std::uint16_t* dinp16) override;
  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int N, int C,
                         int vocab_start, int vocab_rows) override;
  void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens, int N,
                          int C, int vocab_start, int vocab_rows) override;
  void positional_forward(float* out, const float* wpe, int B, int T, int C) override;
  void positional_backward(float* dwpe, const float* dout, int B, int T, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C,
                         std::uint16_t* out16 = nullptr) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C,
                          const std::uint16_t* dout16) override;
  void gelu_forward(float* out, const float* inp, std::int64_t n, std::uint16_t* inp16,
                    std::uint16_t* out16) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                     GradWrite dinp_write, const std::uint16_t* inp16) override;
  void attention_forward(float* out, float* att, float* workspace, const float* qkv, int B,
                         int T, int C, int NH, const std::uint16_t* qkv16 = nullptr,
                         std::uint16_t* out16 = nullptr) override;
  void attention_backward(float* dqkv, float* workspace, const float* dout, const float* qkv,
                          const float* out, const float* att, int B, int T, int C, int NH,
                          GradWrite dqkv_write, const std::uint16_t* qkv16,
                          const std::uint16_t* out16, const std::uint16_t* dout16) override;
  std::size_t attention_workspace_floats(int T) const override;
  std::size_t attention_saved_floats(int B, int T, int C, int NH) const override;
  void attention_decode(float* out, float* workspace, const float* q, const float* k,
                        const float* v, int T, int C, int NH, int ld) override;
  void residual_forward(float* out, const float* a, const float* b, std::int64_t n) override;
  void accumulate(float* dst, const float* src, std::int64_t n) override;
  void scale(float* x, float s, std::int64_t n) override;
  void fill(float* x, float value, std::int64_t n) override;
  void copy_floats(float* dst, const float* src, std::int64_t n) override;
  double sum_squares(const float* x, std::int64_t n) override;
  void convert_to_16bit(std::uint16_t* dst, const float* src, std::int64_t n,
                        DType fmt) override;
  void convert_from_16bit(float* dst, const std::uint16_t* src, std::int64_t n,
                          DType fmt) override;
  void round_to_16bit(float* dst, const float* src, std::int64_t n, DType fmt) override;
  bool any_nonfinite(const float* x, std::int64_t n) override;
  void crossentropy_forward(float* losses, float* lse, const float* logits,
                            const std::int32_t* targets, int N, int V, int Vp) override;
  void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                             const std::int32_t* targets, const float* dlosses, int N, int V,
                             int Vp) override;
  void crossentropy_shard_stats(float* max, float* target_logit, const float* logits,
                                const std::int32_t* targets, int N, int V, int ld,
                                int vocab_start) override;
  void crossentropy_shard_sumexp(float* sumexp, const float* logits, const float* max, int N,
                                 int V, int ld) override;
  void crossentropy_shard_finish(float* losses, float* lse, const float* max,
                                 const float* sumexp, const float* target_logit, int N) override;
  void crossentropy_shard_backward(float* dlogits, const float* logits, const float* lse,
                                   const std::int32_t* targets, const float* dlosses, int N,
                                   int V, int ld, int vocab_start) override;
  void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, int step,
             float grad_scale) override;
  void sgd(float* param, const float* grad, float* mom, std::int64_t n, float lr, float momentum,
           float weight_decay, float grad_scale) override;

 private:
  // Allocations are AlignedBuffers (pre-faulted, counted), kept by address until freed.
  mutable std::mutex mutex_;
  std::map<const char*, AlignedBuffer> blocks_;  // by start address, for contains()
  // Attention saves each row's log-sum-exp (2 floats), not its T probabilities: one more
  // GEMM per query block in backward for O(T) instead of O(T^2) memory.
  // DTRAIN_CPU_ATTENTION_PROBABILITIES=1 saves the probabilities.
  const cpu::AttentionSaved attention_saves_;
};

}  // namespace dtrain
