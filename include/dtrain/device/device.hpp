#pragma once
// Device: the one interface through which the layers above run memory operations and op
// kernels. The CPU implementation uses OpenBLAS; a CUDA implementation lives in a plugin
// (libdtrain_cuda.so) loaded with dlopen and implements the same virtual methods, so nn and
// everything above it never needs to know which one it talks to.
//
// Conventions (as in llm.c): every op works on raw pointers into device memory plus sizes,
// tensors are row-major, shapes are given in the comment of each method. Forward ops write
// their outputs; backward ops ACCUMULATE (+=) into both parameter gradients and input
// gradients, so the caller zeroes gradient buffers once and layers may share them. The input
// gradient of linear_backward, gelu_backward and attention_backward may instead be written
// over (GradWrite::overwrite) where the op is its only producer: no zeroing pass before, no
// read of the old values inside. All
// floating-point data is fp32; the 16-bit formats appear as rounding and conversion ops, and
// as the optional 16-bit copies of inputs ("...16" arguments) that a device multiplying 16-bit
// operands reads in place of the fp32 values (gemm_operand_format).
// Arithmetic is fp32 except GEMMs, which a device may run with reduced-precision operands
// (the CUDA device: TF32 by default, bf16/fp16 after set_gemm_operand_format) and fp32
// accumulation. Ops are synchronous on the CPU; on an asynchronous
// device they are ordered on the device's stream and synchronize() waits for them.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/device/tensor.hpp"
#include "dtrain/export.hpp"

namespace dtrain {

// One range of Device::adamw_ranges: n elements at these offsets (floats) into its param,
// grad and moment buffers, with their own weight decay.
struct AdamWRange {
  std::int64_t param = 0, grad = 0, state = 0, n = 0;
  float weight_decay = 0.0f;
};

enum class CopyKind : int { host_to_device = 0, device_to_host = 1, device_to_device = 2 };

class DTRAIN_API Device {
 public:
  virtual ~Device();

  virtual DeviceKind kind() const noexcept = 0;
  virtual std::string name() const = 0;
  // Threads used by kernels and BLAS on this device (CPU); n <= 0 keeps the default.
  virtual void set_num_threads(int n) = 0;
  virtual int num_threads() const = 0;

  // ---- memory --------------------------------------------------------------
  // allocate: at least 64-byte aligned, zero-filled (on the CPU small blocks pre-faulted,
  // blocks of 1 MiB and up faulted in where first written). Call it at set-up, never inside
  // a step.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* ptr) noexcept = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) = 0;
  virtual void zero(void* ptr, std::size_t bytes) = 0;
  // Address space for an arena (the parameter and gradient arenas), whose ranges discard()
  // can hand back. It starts as if discarded: restore() a range before using it. The CPU's
  // zero pages come when written (restore does nothing); a GPU maps nothing until restore.
  // The default is allocate().
  virtual void* allocate_arena(std::size_t bytes) { return allocate(bytes); }
  // Hands the memory of the whole pages (GPU: mapping chunks) inside the range back; ZeRO 2/3
  // drop the pieces of the arenas a rank does not own this way. Until restore() is called on
  // it, the range must not be read or written: on a GPU it is unmapped. The default zeroes.
  virtual void discard(void* ptr, std::size_t bytes) { zero(ptr, bytes); }
  // Makes a discarded range (or part of one) usable again, zero-filled; call it before the
  // range is next written or read. The CPU needs nothing (its pages read as zeros and come
  // back when written); a GPU maps memory again. The default does nothing.
  virtual void restore(void* /*ptr*/, std::size_t /*bytes*/) {}
  // Whether discard() hands memory back (the CPU, a GPU with virtual memory management) or
  // only zeroes it (the default).
  virtual bool discard_releases_memory() const noexcept { return false; }
  // Gives the system memory kept for reuse (a GPU's spare arena chunks, which restore() would
  // take again). Trim::unused: what nothing took since the last call; the Trainer trims so
  // once per step, so what a step needs stays and nothing else. Trim::all: all of it, after
  // set-up, which held memory no step needs (call synchronize() first: memory
  // that queued work still uses is not spare yet). The default does nothing.
  enum class Trim { unused, all };
  virtual void trim_memory(Trim /*what*/) {}
  // Bytes that new allocations could take now (the CPU: free physical memory; a GPU: free
  // device memory); 0 where unknown (the default).
  virtual std::size_t available_memory() const { return 0; }
  virtual void synchronize() = 0;

  // ---- GEMM ----------------------------------------------------------------
  // C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C; row-major with leading dims
  // lda/ldb/ldc; op(X) = X^T when trans_X.
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                    int lda, const float* B, int ldb, float beta, float* C, int ldc) = 0;
  // batch independent GEMMs; matrix i starts at A + i*stride_a (likewise B, C).
  virtual void gemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                                    const float* A, int lda, std::int64_t stride_a,
                                    const float* B, int ldb, std::int64_t stride_b, float beta,
                                    float* C, int ldc, std::int64_t stride_c, int batch) = 0;
  // The precision GEMM operands need: DType::f32 (the default), or bf16/f16 under mixed
  // precision. A device with 16-bit matrix units may then round both operands to fmt and
  // multiply on them, accumulating in fp32 (the CUDA device); one without keeps fp32
  // operands (the CPU, which only checks fmt). Anything else: Error(Errc::invalid_argument).
  virtual void set_gemm_operand_format(DType fmt);
  // The format the GEMMs multiply in: bf16/f16 after set_gemm_operand_format on a device with
  // 16-bit matrix units (the CUDA device), else f32 (the default, and always the CPU).
  virtual DType gemm_operand_format() const { return DType::f32; }

  // How a backward op writes an input gradient: added into what the buffer holds, or written
  // over it (the buffer may then hold anything before, NaN included).
  enum class GradWrite { accumulate, overwrite };

  // ---- linear layer --------------------------------------------------------
  // out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]   (bias may be null)
  // inp16, dout16 (optional): inp [N,C], dout [N,OC] already rounded to a 16-bit
  // gemm_operand_format(), which the device then reads instead of rounding the fp32 values
  // itself (the same result bit for bit, one conversion less); ignored while that format is
  // f32, and so never read by the CPU. out16 (optional): out rounded to that format written
  // there too, as layernorm_forward's copy (an error while it is f32); with it, out may be
  // null, and a device may then have the GEMM write the rounded words alone.
  virtual void linear_forward(float* out, const float* inp, const float* weight,
                              const float* bias, int N, int C, int OC,
                              const std::uint16_t* inp16 = nullptr,
                              std::uint16_t* out16 = nullptr) = 0;
  // out[N,OC] = residual[N,OC] + (inp · weight^T + bias): a layer whose output joins a
  // residual stream. The default is linear_forward into out, then residual_forward (the same
  // values bit for bit); a device may add the residual in the GEMM's epilogue instead (in that
  // epilogue's rounding order). out may not alias residual.
  virtual void linear_forward_residual(float* out, const float* residual, const float* inp,
                                       const float* weight, const float* bias, int N, int C,
                                       int OC, const std::uint16_t* inp16 = nullptr);
  // dinp[N,C] += dout·W (= with overwrite); dweight[OC,C] += dout^T·inp; dbias[OC] +=
  // sum_n dout. dinp or dbias may be null (not needed / no bias). Under a 16-bit
  // gemm_operand_format, inp may be null where inp16 is given, and dout where dout16 is and
  // there is no dbias; dinp16 (then only; Error(Errc::invalid_argument) otherwise) takes the
  // input gradient as words of that format instead of dinp (null), written over: the GEMM
  // rounds its fp32 result once, for a reader of words (the op before, as PyTorch's autocast
  // hands a bf16 gradient on).
  virtual void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int N, int C, int OC,
                               GradWrite dinp_write = GradWrite::accumulate,
                               const std::uint16_t* inp16 = nullptr,
                               const std::uint16_t* dout16 = nullptr,
                               std::uint16_t* dinp16 = nullptr) = 0;

  // ---- embeddings ----------------------------------------------------------
  // out[N,C] = wte[tokens[n] - vocab_start] for tokens in [vocab_start, vocab_start+vocab_rows),
  // zero rows otherwise (so a vocab-parallel shard contributes only its own rows).
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, int N,
                                 int C, int vocab_start, int vocab_rows) = 0;
  // dwte[tokens[n] - vocab_start] += dout[n] for tokens in the slice.
  virtual void embedding_backward(float* dwte, const float* dout, const std::int32_t* tokens,
                                  int N, int C, int vocab_start, int vocab_rows) = 0;
  // out[B,T,C] += wpe[T,C] (broadcast over B)
  virtual void positional_forward(float* out, const float* wpe, int B, int T, int C) = 0;
  // dwpe[T,C] += sum_b dout[b]
  virtual void positional_backward(float* dwpe, const float* dout, int B, int T, int C) = 0;

  // ---- layernorm -----------------------------------------------------------
  // out[N,C] = (inp - mean) * rstd * weight[C] + bias[C]; saves mean[N], rstd[N]. out16
  // (optional): out rounded to a 16-bit gemm_operand_format() written there too, in the same
  // pass, as gelu_forward's copies; with it, out may be null (only the copy is written).
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C,
                                 std::uint16_t* out16 = nullptr) = 0;
  // dinp[N,C] +=, dweight[C] +=, dbias[C] += from dout[N,C]. dout16 (optional): dout as
  // 16-bit words of a 16-bit gemm_operand_format() (a linear layer's dinp16), read instead of
  // dout (which may then be null); ignored while that format is f32 (the CPU).
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C,
                                  const std::uint16_t* dout16 = nullptr) = 0;

  // ---- GELU (tanh form) ----------------------------------------------------
  // out[n] = gelu(inp[n]). inp16, out16 (optional): inp and out rounded to a 16-bit
  // gemm_operand_format() written there too, in the same pass (copies a caller keeps and hands
  // back later as "...16" arguments); Error(Errc::invalid_argument) while that format is f32.
  // With out16, out may be null: a caller that reads only the copy saves the fp32 write.
  virtual void gelu_forward(float* out, const float* inp, std::int64_t n,
                            std::uint16_t* inp16 = nullptr, std::uint16_t* out16 = nullptr) = 0;
  // out16[n] = gelu(inp16[n]), both 16-bit words of a 16-bit gemm_operand_format(): for an
  // input that exists only as words (a linear layer's out16), read as they are, so forward
  // computes on the values gelu_backward's inp16 differentiates at. Only a device with 16-bit
  // GEMM operands has it; the default throws Error(Errc::unavailable).
  virtual void gelu_forward_16bit(std::uint16_t* out16, const std::uint16_t* inp16,
                                  std::int64_t n);
  // dinp[n] += gelu'(inp) * dout (= with overwrite). inp16 (optional): inp as 16-bit words of
  // a 16-bit gemm_operand_format(), read instead of inp (which may then be null) as linear
  // layers read theirs; exact, so the same result as from the widened values. Ignored while
  // that format is f32 (the CPU).
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                             GradWrite dinp_write = GradWrite::accumulate,
                             const std::uint16_t* inp16 = nullptr) = 0;
  // For GELU after a linear layer with a bias (rows x cols): the gradient gelu_backward writes
  // from inp16 and dout, rounded into dinp16, words of a 16-bit gemm_operand_format() (that
  // layer's linear_backward dout16), and its column sums over the fp32 values added into
  // dbias[cols] (the layer's bias gradient, as linear_backward sums it). One pass over the
  // gradient where gelu_backward and linear_backward's rounding made two. Only a device with
  // 16-bit GEMM operands has it; the default throws Error(Errc::unavailable). dbias may not be
  // null. dout16 (optional): dout as words of that format (the layer after's dinp16), read
  // instead of dout (then null).
  virtual void gelu_backward_rounded(std::uint16_t* dinp16, float* dbias,
                                     const std::uint16_t* inp16, const float* dout, int rows,
                                     int cols, const std::uint16_t* dout16 = nullptr);

  // ---- causal multi-head self-attention ------------------------------------
  // qkv[B,T,3C] (q, k, v blocks, each NH heads x C/NH) -> out[B,T,C]; saves in att what
  // backward needs, attention_saved_floats(B, T, C, NH) floats: by default the softmax
  // probabilities att[B,NH,T,T] (upper triangle zero). Both directions take a workspace of
  // attention_workspace_floats(T) floats. qkv16 (optional): qkv as 16-bit words of a 16-bit
  // gemm_operand_format(), which the device may read instead (the same values once rounded);
  // ignored while that format is f32 (the CPU). out16 (optional): out rounded to that format
  // written there too, as gelu_forward's copies (an error while it is f32); with it, out may
  // be null.
  virtual void attention_forward(float* out, float* att, float* workspace, const float* qkv,
                                 int B, int T, int C, int NH,
                                 const std::uint16_t* qkv16 = nullptr,
                                 std::uint16_t* out16 = nullptr) = 0;
  // dqkv[B,T,3C] += (= with overwrite) from dout[B,T,C], given the forward's out and att.
  // qkv16, out16, dout16 (optional): qkv, out and dout as 16-bit words of a 16-bit
  // gemm_operand_format() (dout16: the output projection's dinp16), read instead of them
  // (which may then be null), as gelu_backward's inp16; ignored while that format is f32 (the
  // CPU).
  virtual void attention_backward(float* dqkv, float* workspace, const float* dout,
                                  const float* qkv, const float* out, const float* att, int B,
                                  int T, int C, int NH,
                                  GradWrite dqkv_write = GradWrite::accumulate,
                                  const std::uint16_t* qkv16 = nullptr,
                                  const std::uint16_t* out16 = nullptr,
                                  const std::uint16_t* dout16 = nullptr) = 0;
  // For attention after a linear layer with a bias (qkv = x·W^T + b, as GPT's c_attn): the
  // gradient attention_backward writes over dqkv (GradWrite::overwrite), rounded into dqkv16,
  // words of a 16-bit gemm_operand_format() (that layer's linear_backward dout16), and its
  // column sums over the fp32 values added into dbias[3C] (the layer's bias gradient, as
  // linear_backward sums it, in another order). One pass where attention_backward and
  // linear_backward's rounding made two, and dqkv is never fp32 in memory. Returns false, doing
  // nothing, where the device has no such path (the default, so the CPU; on a GPU, the
  // unfused attention): the caller then runs attention_backward and the layer's own backward.
  // dout16 (optional): dout as words, read instead of dout (then null), as attention_backward's.
  virtual bool attention_backward_rounded(std::uint16_t* dqkv16, float* dbias, float* workspace,
                                          const float* dout, const float* att, int B, int T,
                                          int C, int NH, const std::uint16_t* qkv16,
                                          const std::uint16_t* out16,
                                          const std::uint16_t* dout16 = nullptr);
  virtual std::size_t attention_workspace_floats(int T) const = 0;
  // The size of att. A device may save less than the probabilities (the CPU and the CUDA
  // device's fused attention save one log-sum-exp per row); the answer may depend on the GEMM
  // operand format, so size att after set_gemm_operand_format.
  virtual std::size_t attention_saved_floats(int B, int T, int C, int NH) const;
  // One query row against the keys and values its sequence has so far (generation with a
  // key/value cache): q[C] (NH heads of C/NH), k[T,ld] and v[T,ld] (row t: position t, the
  // query's own position last; head h in columns [h*C/NH, (h+1)*C/NH)). out[C] gets per head
  // softmax(q_h k_h^T / sqrt(C/NH)) v_h: what attention_forward gives the last row of a
  // sequence of T. workspace: NH*T floats.
  virtual void attention_decode(float* out, float* workspace, const float* q, const float* k,
                                const float* v, int T, int C, int NH, int ld) = 0;

  // ---- residual / elementwise ----------------------------------------------
  virtual void residual_forward(float* out, const float* a, const float* b, std::int64_t n) = 0;
  virtual void accumulate(float* dst, const float* src, std::int64_t n) = 0;  // dst += src
  virtual void scale(float* x, float s, std::int64_t n) = 0;
  virtual void fill(float* x, float value, std::int64_t n) = 0;
  virtual void copy_floats(float* dst, const float* src, std::int64_t n) = 0;
  // sum of squares, accumulated in double (for the global gradient norm).
  virtual double sum_squares(const float* x, std::int64_t n) = 0;
  // sums[i] = the sum of squares of x[starts[i], starts[i] + lengths[i]) in double, for i in
  // [0, runs), all in one go (one wait on an asynchronous device; sums is host memory). Each
  // run's sum depends only on its own elements, so fixed-order reductions stay reproducible.
  // The default calls sum_squares once per run.
  virtual void sum_squares_runs(const float* x, const std::int64_t* starts,
                                const std::int64_t* lengths, std::size_t runs, double* sums);

  // ---- 16-bit float formats (mixed precision) --------------------------------
  // fmt is DType::bf16 or DType::f16 (anything else: Error(Errc::invalid_argument)).
  // Rounding is to nearest, ties to even, with subnormals; f16 values of magnitude 65520 and
  // above become +-inf; NaN stays NaN (quiet), inf stays inf. Results are bit for bit the
  // same on every device.
  // dst[i] = the 16-bit encoding of src[i]; dst and src may not overlap.
  virtual void convert_to_16bit(std::uint16_t* dst, const float* src, std::int64_t n,
                                DType fmt) = 0;
  // dst[i] = the fp32 value of the 16-bit encoding src[i] (exact); dst and src may not overlap.
  virtual void convert_from_16bit(float* dst, const std::uint16_t* src, std::int64_t n,
                                  DType fmt) = 0;
  // dst[i] = src[i] rounded to the nearest value of fmt, kept in fp32; dst may equal src.
  virtual void round_to_16bit(float* dst, const float* src, std::int64_t n, DType fmt) = 0;
  // Whether any of x[0..n) is inf or NaN (waits for the result on an asynchronous device).
  virtual bool any_nonfinite(const float* x, std::int64_t n) = 0;

  // ---- loss ----------------------------------------------------------------
  // Fused softmax + cross-entropy over logits[N,Vp] whose first V columns are the real
  // vocabulary (padding columns never affect anything). losses[N] = lse[n] - logit[target];
  // saves lse[N] (log-sum-exp) for backward.
  virtual void crossentropy_forward(float* losses, float* lse, const float* logits,
                                    const std::int32_t* targets, int N, int V, int Vp) = 0;
  // The same from logits16[N,Vp], the logits as 16-bit words of a 16-bit gemm_operand_format()
  // (an LM head's linear_forward out16), read as they are. Only a device with 16-bit GEMM
  // operands has it; the default throws Error(Errc::unavailable).
  virtual void crossentropy_forward_16bit(float* losses, float* lse,
                                          const std::uint16_t* logits16,
                                          const std::int32_t* targets, int N, int V, int Vp);
  // dlogits[N,Vp] = (softmax - onehot(target)) * dlosses[n]; padding columns set to 0.
  // WRITES (does not accumulate); dlogits may alias logits.
  virtual void crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                     const std::int32_t* targets, const float* dlosses, int N,
                                     int V, int Vp) = 0;

  // ---- vocabulary-parallel loss ---------------------------------------------
  // The same loss when the vocabulary is split over ranks: logits[N,ld] hold the tokens
  // [vocab_start, vocab_start+V) in their first V columns (ld - V padding columns are never
  // read). The caller reduces over the shards between the passes: max (op max), then
  // sumexp and target_logit (op sum); no rank ever holds a full row of logits.
  // Pass 1: max[n] over the V columns (-inf when V == 0); target_logit[n] = the logit of
  // targets[n] when this shard owns it, else 0.
  virtual void crossentropy_shard_stats(float* max, float* target_logit, const float* logits,
                                        const std::int32_t* targets, int N, int V, int ld,
                                        int vocab_start) = 0;
  // Pass 2: sumexp[n] = sum_{j<V} exp(logits[n,j] - max[n]) (max reduced over shards).
  virtual void crossentropy_shard_sumexp(float* sumexp, const float* logits, const float* max,
                                         int N, int V, int ld) = 0;
  // Pass 3: lse[n] = max[n] + log(sumexp[n]); losses[n] = lse[n] - target_logit[n].
  virtual void crossentropy_shard_finish(float* losses, float* lse, const float* max,
                                         const float* sumexp, const float* target_logit,
                                         int N) = 0;
  // dlogits[N,ld] = (exp(logits - lse) - onehot(targets - vocab_start)) * dlosses[n] over the
  // V columns, padding columns 0. WRITES; dlogits may alias logits.
  virtual void crossentropy_shard_backward(float* dlogits, const float* logits, const float* lse,
                                           const std::int32_t* targets, const float* dlosses,
                                           int N, int V, int ld, int vocab_start) = 0;
  // Either backward (crossentropy_backward: vocab_start 0, V the vocabulary, ld = Vp) with the
  // gradient written rounded to a 16-bit gemm_operand_format(), dlogits16[N,ld], as
  // linear_backward's dout16: never fp32 in memory. logits16 (optional): the logits as words
  // of that format (crossentropy_forward_16bit's), read instead of logits (which may then be
  // null); dlogits16 may alias it, but not the fp32 logits. Only a device with 16-bit GEMM
  // operands has it; the default throws Error(Errc::unavailable).
  virtual void crossentropy_backward_16bit(std::uint16_t* dlogits16, const float* logits,
                                           const float* lse, const std::int32_t* targets,
                                           const float* dlosses, int N, int V, int ld,
                                           int vocab_start,
                                           const std::uint16_t* logits16 = nullptr);

  // ---- optimiser updates over flat buffers (pure: usable on any shard) ------
  // g = grad*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // param -= lr * (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + weight_decay * param)
  virtual void adamw(float* param, const float* grad, float* m, float* v, std::int64_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                     float grad_scale) = 0;
  // adamw over each of `count` ranges (a model's tensors): the same updates as one adamw()
  // call a range, which is what the default does; a device may batch them into few launches.
  virtual void adamw_ranges(float* param, const float* grad, float* m, float* v,
                            const AdamWRange* ranges, std::size_t count, float lr, float beta1,
                            float beta2, float eps, int step, float grad_scale);
  // g = grad*grad_scale + weight_decay*param; mom = momentum*mom + g; param -= lr*mom
  // (mom may be null when momentum == 0).
  virtual void sgd(float* param, const float* grad, float* mom, std::int64_t n, float lr,
                   float momentum, float weight_decay, float grad_scale) = 0;
};

// The process-wide CPU device.
DTRAIN_API Device& cpu_device();

// Returns fmt when it is DType::bf16 or DType::f16; otherwise throws
// Error(Errc::invalid_argument) naming `op` (the 16-bit ops of Device check with it).
DTRAIN_API DType check_16bit_format(DType fmt, const char* op);
// The same, with DType::f32 also accepted (a precision that may be full or 16-bit).
DTRAIN_API DType check_float_format(DType fmt, const char* op);

// "cpu", "cuda" or "auto". "cuda" without a usable GPU and plugin throws
// Error(Errc::unavailable); "auto" picks CUDA when both are present and the CPU otherwise.
// The returned device is owned by the process (cpu_device() or the loaded plugin's device).
DTRAIN_API Device& select_device(const std::string& which);
// The same, with `option` naming the setting in the messages ("--device" above).
DTRAIN_API Device& select_device(const std::string& which, const std::string& option);

// True when libdtrain_cuda.so can be loaded and reports at least one GPU (checked once).
DTRAIN_API bool cuda_available() noexcept;

// RAII device memory: allocated once from a Device, freed with it.
class DTRAIN_API DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& dev, std::size_t bytes);
  // An arena (Device::allocate_arena), whose ranges may be discarded and restored.
  static DeviceBuffer arena(Device& dev, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() noexcept { return data_; }
  const void* data() const noexcept { return data_; }
  template <class T> T* as() noexcept { return static_cast<T*>(data_); }
  template <class T> const T* as() const noexcept { return static_cast<const T*>(data_); }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  DeviceBuffer(Device& dev, void* data, std::size_t bytes)
      : dev_(&dev), data_(data), bytes_(bytes) {}
  void reset() noexcept;
  Device* dev_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace dtrain
