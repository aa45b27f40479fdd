#pragma once
// CudaDevice: the Device interface on one GPU. Every op is queued on the device's own
// stream in call order (cuBLAS for GEMMs, dtrain's kernels for the rest), so ops never wait
// for each other on the host; synchronize() and the copies that involve host memory wait.
// Memory comes from a caching allocator: after set-up no op reaches cudaMalloc. Arenas
// (allocate_arena) live in virtual memory where the driver allows, so discard() hands
// their chunks back and restore() maps them again (ArenaMemory).
//
// fp32 GEMMs use TF32 tensor cores unless DTRAIN_CUDA_TF32=0 (exact fp32, used by the
// kernel tests); under mixed precision (set_gemm_operand_format) bf16/fp16 tensor cores with
// fp32 accumulation, on 16-bit copies of the operands. Everything else computes in fp32
// (sum_squares in double), as the CPU does.
// DTRAIN_CUDA_PROFILE=1 prints the GPU time of each op at exit (OpProfile).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda/allocator.hpp"
#include "device/cuda/arena_memory.hpp"
#include "device/cuda/bias_gemm.hpp"
#include "device/cuda/op_profile.hpp"
#include "dtrain/device/device.hpp"

namespace dtrain::cuda {

// The oldest GPUs the kernels are built for: compute capability 8.0 (CMake's arches 80;90).
inline constexpr int kOldestComputeMajor = 8;

// cudaMalloc/cudaFree on one device.
class DeviceMemory final : public RawMemory {
 public:
  explicit DeviceMemory(int ordinal) : ordinal_(ordinal) {}
  void* allocate(std::size_t bytes) override;
  void release(void* ptr) noexcept override;
  void wait_idle() override;

 private:
  int ordinal_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  int ordinal() const noexcept { return ordinal_; }
  cudaStream_t stream() const noexcept { return stream_; }
  AllocatorStats memory_stats() const { return alloc_.stats(); }
  bool tf32() const noexcept { return tf32_; }
  // Makes this GPU current on the calling thread (CUDA's current device is per thread).
  void activate() const;

  DeviceKind kind() const noexcept override { return DeviceKind::cuda; }
  std::string name() const override;
  void set_num_threads(int) override {}  // kernel launch sizes are chosen per op
  int num_threads() const override { return 1; }

  void* allocate(std::size_t bytes) override;
  void* allocate_arena(std::size_t bytes) override;
  void free(void* ptr) noexcept override;
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) override;
  void zero(void* ptr, std::size_t bytes) override;
  void discard(void* ptr, std::size_t bytes) override;
  void restore(void* ptr, std::size_t bytes) override;
  bool discard_releases_memory() const noexcept override { return arenas_->supported(); }
  void trim_memory(Trim what) override { arenas_->trim(what == Trim::all); }
  std::size_t available_memory() const override;
  void synchronize() override;

  void set_gemm_operand_format(DType fmt) override;
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;
  void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                            const float* A, int lda, std::int64_t stride_a, const float* B,
                            int ldb, std::int64_t stride_b, float beta, float* C, int ldc,
                            std::int64_t stride_c, int batch) override;
  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC, const std::uint16_t* inp16,
                      std::uint16_t* out16) override;
  void linear_forward_residual(float* out, const float* residual, const float* inp,
                               const float* weight, const float* bias, int N, int C, int OC,
                               const std::uint16_t* inp16) override;
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC,
                       GradWrite dinp_write, const std::uint16_t* inp16,
                       const std::uint16_t* dout16, std::uint16_t* dinp16) override;
  DType gemm_operand_format() const override { return gemm_operands_; }
  // A caller's 16-bit copy ("...16" argument) as the ops read it: under 16-bit GEMM operands,
  // and ignored (null) while they are fp32.
  const std::uint16_t* readable(const std::uint16_t* words) const noexcept {
    return gemm_operands_ == DType::f32 ? nullptr : words;
  }
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
  void gelu_forward_16bit(std::uint16_t* out16, const std::uint16_t* inp16,
                          std::int64_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                     GradWrite dinp_write, const std::uint16_t* inp16) override;
  void gelu_backward_rounded(std::uint16_t* dinp16, float* dbias, const std::uint16_t* inp16,
                             const float* dout, int rows, int cols,
                             const std::uint16_t* dout16) override;
  void attention_forward(float* out, float* att, float* workspace, const float* qkv, int B,
                         int T, int C, int NH, const std::uint16_t* qkv16 = nullptr,
                         std::uint16_t* out16 = nullptr) override;
  void attention_backward(float* dqkv, float* workspace, const float* dout, const float* qkv,
                          const float* out, const float* att, int B, int T, int C, int NH,
                          GradWrite dqkv_write, const std::uint16_t* qkv16,
                          const std::uint16_t* out16, const std::uint16_t* dout16) override;
  bool attention_backward_rounded(std::uint16_t* dqkv16, float* dbias, float* workspace,
                                  const float* dout, const float* att, int B, int T, int C,
                                  int NH, const std::uint16_t* qkv16,
                                  const std::uint16_t* out16,
                                  const std::uint16_t* dout16) override;
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
  void sum_squares_runs(const float* x, const std::int64_t* starts, const std::int64_t* lengths,
                        std::size_t runs, double* sums) override;
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
  void crossentropy_forward_16bit(float* losses, float* lse, const std::uint16_t* logits16,
                                  const std::int32_t* targets, int N, int V, int Vp) override;
  void crossentropy_backward_16bit(std::uint16_t* dlogits16, const float* logits,
                                   const float* lse, const std::int32_t* targets,
                                   const float* dlosses, int N, int V, int ld, int vocab_start,
                                   const std::uint16_t* logits16) override;
  void adamw_ranges(float* param, const float* grad, float* m, float* v,
                    const AdamWRange* ranges, std::size_t count, float lr, float beta1,
                    float beta2, float eps, int step, float grad_scale) override;
  void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, int step,
             float grad_scale) override;
  void sgd(float* param, const float* grad, float* mom, std::int64_t n, float lr, float momentum,
           float weight_decay, float grad_scale) override;

 private:
  // Device scratch for reductions and the attention score gradients; grows to the largest
  // request (during the first step) and is then reused. Valid until the next call; ops
  // queued on the stream before a growth still see the old block, which the allocator hands
  // out again only to work queued after them.
  float* scratch(std::size_t floats);
  cublasComputeType_t compute_type() const noexcept;
  // A and B of a column-major GEMM as cuBLAS is given them: fp32 as stored, or under mixed
  // precision rounded into the staging buffers first. (cuBLAS's FAST_16BF/_16F compute types
  // on fp32 data ran TF32 kernels on an H200 with cuBLAS 13.0: neither the format's rounding
  // nor its speed.) a16, b16: copies of g.a, g.b in that format the caller already has (a
  // linear layer's input kept in 16 bits; linear_backward's dout, which its first GEMM
  // staged, for its second), used as they are. Valid until the next GEMM.
  struct GemmOperands {
    const void* a;
    const void* b;
    cudaDataType type;
  };
  GemmOperands gemm_operands(const ColumnMajorGemm& g, int batch,
                             const std::uint16_t* a16 = nullptr,
                             const std::uint16_t* b16 = nullptr);
  // `n` elements of src in the GEMM operand format, in staging buffer `slot` (0: A, 1: B),
  // which grows to the largest request, as scratch() does.
  const std::uint16_t* stage(int slot, const float* src, std::int64_t n);
  // Staging buffer `slot`, grown to `n` elements.
  std::uint16_t* staging(int slot, std::int64_t n);
  // One cuBLAS GEMM with g's shape on operands in the GEMM's format; C at `c` as `c_type`
  // (fp32, or x's 16-bit format: the fp32 result rounded to nearest even).
  void run_gemm(const ColumnMajorGemm& g, const GemmOperands& x, float alpha, float beta,
                void* c, cudaDataType c_type);
  // Both linear forwards without their profile span: out = inp · weight^T + bias (+ residual
  // where given), and its 16-bit copy where out16 is given (only the copy where out is null).
  void queue_linear(float* out, const float* residual, const float* inp, const float* weight,
                    const float* bias, int N, int C, int OC, const std::uint16_t* inp16,
                    std::uint16_t* out16);
  // linear_forward's result rounded by the GEMM itself into out16 (g, x: its product and
  // operands); false, with nothing queued, where cuBLASLt has no algorithm for it.
  bool linear_into_16bit(const ColumnMajorGemm& g, const GemmOperands& x, const float* bias,
                         std::uint16_t* out16);
  // gemm() without its profile span. A16, B16: 16-bit copies of the row-major A and B the
  // caller already has, or null (gemm_operands). C16: C as 16-bit words of the operand format
  // instead (C null, beta 0): the GEMM rounds its fp32 result.
  void queue_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                  int lda, const float* B, int ldb, float beta, float* C, int ldc,
                  const std::uint16_t* A16 = nullptr, const std::uint16_t* B16 = nullptr,
                  std::uint16_t* C16 = nullptr);
  // Attention's heads per batched GEMM: a group's score matrices (heads x T x T floats) fit
  // in half the L2, so the softmax and the GEMM after it read them from the cache.
  int attention_heads_per_group(int T, int NH) const noexcept;
  // The fused kernels (flash_attention.cu) serve 16-bit GEMM operands and head sizes 16, 32,
  // 48 and 64, unless DTRAIN_CUDA_FUSED_ATTENTION=0; otherwise the GEMMs around the softmax.
  bool fused_attention(int C, int NH) const noexcept;
  // activate(), and the op's GPU time under DTRAIN_CUDA_PROFILE until the span ends; `work`
  // is what the op computes and moves, for the profile's rates.
  OpProfile::Span begin_op(const char* op, OpWork work = {}) {
    activate();
    return OpProfile::Span(*profile_, op, work);
  }

  int ordinal_;
  std::string name_;  // the GPU; name() adds the GEMM precision
  DeviceMemory raw_;
  CachingAllocator alloc_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<ArenaMemory> arenas_;  // on stream_
  std::unique_ptr<OpProfile> profile_;   // on stream_
  cublasHandle_t blas_ = nullptr;
  bool tf32_ = true;
  bool fused_attention_ = true;  // DTRAIN_CUDA_FUSED_ATTENTION
  std::size_t l2_bytes_ = 0;
  DType gemm_operands_ = DType::f32;  // set_gemm_operand_format
  void* blas_workspace_ = nullptr;
  // linear_forward's bias in the GEMM's epilogue; null under DTRAIN_CUDA_GEMM_EPILOGUE=0
  std::unique_ptr<BiasGemm> bias_gemm_;
  float* scratch_ = nullptr;
  std::size_t scratch_floats_ = 0;
  std::uint16_t* staging_[2] = {nullptr, nullptr};  // stage()
  std::size_t staging_elements_[2] = {0, 0};
  double* sum_device_ = nullptr;  // [0]: result, then kSumSquaresPartials partial sums
  double* sum_host_ = nullptr;    // pinned, so the read-back is one small DMA
  std::vector<std::int64_t> piece_starts_, piece_lengths_;  // sum_squares_runs, grow-only
  std::vector<double> piece_sums_;
  std::mutex sum_mutex_;
  int* flag_device_ = nullptr;  // any_nonfinite's result
  int* flag_host_ = nullptr;    // pinned
  std::mutex flag_mutex_;
};

}  // namespace dtrain::cuda
