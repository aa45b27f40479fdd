// CudaDevice set-up, memory, copies and synchronisation.
#include "device/cuda/cuda_device.hpp"

#include <algorithm>
#include <cstdio>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/kernels.hpp"
#include "dtrain/core/env.hpp"

namespace dtrain::cuda {
namespace {
constexpr std::size_t kBlasWorkspaceBytes = 32u << 20;  // what cuBLAS recommends on Hopper
}  // namespace

void* DeviceMemory::allocate(std::size_t bytes) {
  void* p = nullptr;
  DTRAIN_CUDA(cudaSetDevice(ordinal_));
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky: clear it for later checks
    return nullptr;
  }
  DTRAIN_CUDA(err);  // anything else (a fault left by a kernel) is not out of memory
  return p;
}

void DeviceMemory::release(void* ptr) noexcept {
  if (ptr) (void)cudaFree(ptr);
}

void DeviceMemory::wait_idle() { DTRAIN_CUDA(cudaDeviceSynchronize()); }

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal), raw_(ordinal), alloc_(raw_) {
  DTRAIN_CUDA(cudaSetDevice(ordinal_));
  cudaDeviceProp prop{};
  DTRAIN_CUDA(cudaGetDeviceProperties(&prop, ordinal_));
  DTRAIN_CHECK(prop.major >= kOldestComputeMajor, Errc::unavailable,
               "CUDA device " << ordinal_ << " (" << prop.name << ") has compute capability "
                              << prop.major << "." << prop.minor << "; the CUDA plugin's kernels need "
                              << kOldestComputeMajor << ".0 or newer");
  tf32_ = env::get_bool(env::cuda::kTf32, true);
  fused_attention_ = env::get_bool(env::cuda::kFusedAttention, true);
  l2_bytes_ = static_cast<std::size_t>(std::max(0, prop.l2CacheSize));
  char text[320];
  std::snprintf(text, sizeof text, "cuda:%d (%s, sm_%d%d, %.1f GiB", ordinal_, prop.name,
                prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  name_ = text;
  DTRAIN_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  arenas_ = std::make_unique<ArenaMemory>(ordinal_, stream_);
  profile_ = std::make_unique<OpProfile>(name_ + ")", stream_);
  DTRAIN_CUDA(cublasCreate(&blas_));
  DTRAIN_CUDA(cublasSetStream(blas_, stream_));
  // A GEMM with a 16-bit C sums split-K parts in fp32, not in C's type: C holds the fp32 sum
  // rounded once (TF32 is asked for by compute type, not by this mode).
  DTRAIN_CUDA(cublasSetMathMode(blas_, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  // cuBLAS's workspace from the cache too, so GEMMs never allocate behind our back.
  blas_workspace_ = alloc_.allocate(kBlasWorkspaceBytes);
  DTRAIN_CUDA(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes));
  if (env::get_bool(env::cuda::kGemmEpilogue, true))
    bias_gemm_ = std::make_unique<BiasGemm>(stream_, blas_workspace_, kBlasWorkspaceBytes);
  sum_device_ = static_cast<double*>(alloc_.allocate(sizeof(double) * (1 + kSumSquaresPartials)));
  DTRAIN_CUDA(cudaMallocHost(reinterpret_cast<void**>(&sum_host_), sizeof(double)));
  flag_device_ = static_cast<int*>(alloc_.allocate(sizeof(int)));
  DTRAIN_CUDA(cudaMallocHost(reinterpret_cast<void**>(&flag_host_), sizeof(int)));
}

// The plugin keeps its devices until the process exits and never runs this (the CUDA
// runtime may already be unloaded by then); it exists for completeness.
CudaDevice::~CudaDevice() {
  (void)cudaSetDevice(ordinal_);
  if (stream_) (void)cudaStreamSynchronize(stream_);
  bias_gemm_.reset();
  if (blas_) (void)cublasDestroy(blas_);
  if (sum_host_) (void)cudaFreeHost(sum_host_);
  alloc_.free(sum_device_);
  if (flag_host_) (void)cudaFreeHost(flag_host_);
  alloc_.free(flag_device_);
  alloc_.free(scratch_);
  for (std::uint16_t* buffer : staging_) alloc_.free(buffer);
  alloc_.free(blas_workspace_);
  arenas_.reset();  // it waits on the stream
  profile_.reset();
  if (stream_) (void)cudaStreamDestroy(stream_);
}

// No per-thread cache of the current device: other code (the constructor, the allocator, the
// transports) sets it too, and a stale cache would launch on the wrong context. Setting the
// device that is already current is cheap.
void CudaDevice::activate() const { DTRAIN_CUDA(cudaSetDevice(ordinal_)); }

void* CudaDevice::allocate(std::size_t bytes) {
  activate();
  if (bytes == 0) bytes = 1;  // a distinct, freeable pointer
  void* p = alloc_.allocate(bytes);
  // Zero-filled as the interface promises; queued, so later ops (and copies) see zeros.
  DTRAIN_CUDA(cudaMemsetAsync(p, 0, bytes, stream_));
  return p;
}

void* CudaDevice::allocate_arena(std::size_t bytes) {
  if (!arenas_->supported()) return allocate(bytes);
  activate();
  return arenas_->allocate(bytes);
}

void CudaDevice::free(void* ptr) noexcept {
  if (!arenas_->free(ptr)) alloc_.free(ptr);
}

void CudaDevice::copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  const OpProfile::Span span = begin_op(  // a copy within the device reads and writes every byte
      "copy", {0, (kind == CopyKind::device_to_device ? 2.0 : 1.0) * static_cast<double>(bytes)});
  // cudaMemcpyDefault: the direction follows from the pointers (unified addressing), so a
  // pinned or device pointer passed as "host" memory still copies correctly.
  DTRAIN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  // Host memory is the caller's again on return (it may read or overwrite it), as on the CPU.
  if (kind != CopyKind::device_to_device) {
    DTRAIN_CUDA(cudaStreamSynchronize(stream_));
    arenas_->reclaim();  // the host waited anyway: discarded chunks go back now
  }
}

void CudaDevice::zero(void* ptr, std::size_t bytes) {
  if (bytes == 0) return;
  const OpProfile::Span span = begin_op("zero", {0, static_cast<double>(bytes)});
  DTRAIN_CUDA(cudaMemsetAsync(ptr, 0, bytes, stream_));
}

void CudaDevice::discard(void* ptr, std::size_t bytes) {
  if (bytes == 0) return;
  activate();
  if (!arenas_->discard(ptr, bytes)) zero(ptr, bytes);  // not an arena: nothing to hand back
}

void CudaDevice::restore(void* ptr, std::size_t bytes) {
  if (bytes == 0) return;
  const OpProfile::Span span = begin_op("restore", {0, static_cast<double>(bytes)});
  if (!arenas_->restore(ptr, bytes)) zero(ptr, bytes);
}

std::size_t CudaDevice::available_memory() const {
  activate();
  std::size_t free_bytes = 0, total = 0;
  DTRAIN_CUDA(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

void CudaDevice::synchronize() {
  activate();
  DTRAIN_CUDA(cudaStreamSynchronize(stream_));
  arenas_->reclaim();  // every discarded chunk's work has passed: hand them back now
  profile_->collect();
}

float* CudaDevice::scratch(std::size_t floats) {
  if (floats > scratch_floats_) {
    float* grown = static_cast<float*>(alloc_.allocate(floats * sizeof(float)));
    alloc_.free(scratch_);
    scratch_ = grown;
    scratch_floats_ = floats;
  }
  return scratch_;
}

double CudaDevice::sum_squares(const float* x, std::int64_t n) {
  const OpProfile::Span span = begin_op("sum_squares", floats_moved(static_cast<double>(n)));
  std::lock_guard<std::mutex> lock(sum_mutex_);
  cuda::sum_squares(stream_, sum_device_, sum_device_ + 1, x, n);
  DTRAIN_CUDA(cudaMemcpyAsync(sum_host_, sum_device_, sizeof(double), cudaMemcpyDeviceToHost,
                              stream_));
  DTRAIN_CUDA(cudaStreamSynchronize(stream_));
  return *sum_host_;
}

// Runs longer than kRunPiece are cut into pieces, one block each, whose sums are added here
// in order: one block for a whole tensor (wte: 38.6 M floats in GPT-2) would leave the GPU
// idle. The piece table goes up and the sums come back through the grow-only scratch:
// starts, lengths (int64) and sums (double), 8 bytes each per piece. Runs of at most
// kRunPiece (--deterministic's) are one piece each, so their sums do not depend on this.
void CudaDevice::sum_squares_runs(const float* x, const std::int64_t* starts,
                                  const std::int64_t* lengths, std::size_t runs, double* sums) {
  if (runs == 0) return;
  constexpr std::int64_t kRunPiece = std::int64_t{1} << 16;
  double floats = 0;
  for (std::size_t r = 0; r < runs; ++r) floats += static_cast<double>(lengths[r]);
  const OpProfile::Span span = begin_op("sum_squares_runs", floats_moved(floats));
  std::lock_guard<std::mutex> lock(sum_mutex_);
  piece_starts_.clear();
  piece_lengths_.clear();
  for (std::size_t r = 0; r < runs; ++r) {
    std::int64_t off = 0;
    do {  // a run of length 0 is one empty piece
      piece_starts_.push_back(starts[r] + off);
      piece_lengths_.push_back(std::min(kRunPiece, lengths[r] - off));
      off += kRunPiece;
    } while (off < lengths[r]);
  }
  const std::size_t pieces = piece_starts_.size();
  piece_sums_.resize(pieces);
  auto* table = reinterpret_cast<std::int64_t*>(scratch(6 * pieces));  // 3 x 8 bytes each
  std::int64_t* d_starts = table;
  std::int64_t* d_lengths = table + pieces;
  auto* d_sums = reinterpret_cast<double*>(table + 2 * pieces);
  const std::size_t bytes = sizeof(std::int64_t) * pieces;
  DTRAIN_CUDA(cudaMemcpyAsync(d_starts, piece_starts_.data(), bytes, cudaMemcpyHostToDevice, stream_));
  DTRAIN_CUDA(cudaMemcpyAsync(d_lengths, piece_lengths_.data(), bytes, cudaMemcpyHostToDevice, stream_));
  cuda::sum_squares_runs(stream_, d_sums, x, d_starts, d_lengths,
                         static_cast<std::int64_t>(pieces));
  DTRAIN_CUDA(cudaMemcpyAsync(piece_sums_.data(), d_sums, sizeof(double) * pieces,
                              cudaMemcpyDeviceToHost, stream_));
  DTRAIN_CUDA(cudaStreamSynchronize(stream_));
  std::size_t piece = 0;
  for (std::size_t r = 0; r < runs; ++r) {
    double sum = 0;
    std::int64_t covered = 0;
    do {
      sum += piece_sums_[piece];
      covered += piece_lengths_[piece++];
    } while (covered < lengths[r]);
    sums[r] = sum;
  }
}

bool CudaDevice::any_nonfinite(const float* x, std::int64_t n) {
  const OpProfile::Span span = begin_op("any_nonfinite", floats_moved(static_cast<double>(n)));
  std::lock_guard<std::mutex> lock(flag_mutex_);
  cuda::any_nonfinite(stream_, flag_device_, x, n);
  DTRAIN_CUDA(cudaMemcpyAsync(flag_host_, flag_device_, sizeof(int), cudaMemcpyDeviceToHost,
                              stream_));
  DTRAIN_CUDA(cudaStreamSynchronize(stream_));
  return *flag_host_ != 0;
}

}  // namespace dtrain::cuda
