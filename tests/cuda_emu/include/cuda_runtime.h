#pragma once
// A CPU stand-in for the parts of the CUDA runtime that lib/device/cuda uses, so the plugin's
// own sources (kernels included) build with g++ and run in the tests on any machine
// (docs/cuda.md, "The CUDA emulator"). It is strict where a GPU is: device memory is
// inaccessible to the host between device operations, work on a stream runs only when the
// host synchronises, launch limits are checked, fresh device memory is NaN-filled, and a
// barrier or shuffle that a real warp could not complete aborts with a message.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Blocks run one at a time, so one static instance per kernel is the block's shared memory.
#define __shared__ static

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

struct cudaUUID_t {
  char bytes[16];
};

struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
};

struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;

constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0;

struct uint3 {
  unsigned x, y, z;
};
// The vector types the kernels load and store 16 or 8 bytes at a time with.
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

// The running thread's coordinates, set by the block scheduler before it resumes a thread.
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t err);

cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes);
cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

// Driver entry points: the emulated virtual memory functions of cuda.h (runtime.cpp).
#define CUDART_VERSION 12080
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};
constexpr unsigned long long cudaEnableDefault = 0;
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status = nullptr);

// ---- device-side functions ---------------------------------------------------------------
void __syncthreads();
int __syncthreads_or(int predicate);
int __syncthreads_and(int predicate);
int __syncthreads_count(int predicate);

namespace dtrain_emu {
// Exchanges 8-byte slots between the lanes of the running warp named in `mask`; returns the
// slot of `src_lane` (the caller's own value when that lane is outside the mask).
std::uint64_t warp_exchange(unsigned mask, std::uint64_t mine, int src_lane);
// Every lane of the running (whole) warp hands in `bytes` bytes (32 at most); each gets all
// 32 lanes' in lane order in `all`. A barrier of the warp, for the warp-wide matrix calls.
void warp_gather(const void* mine, std::size_t bytes, void* all);
// cp.async as a GPU may run it (lib/device/cuda/async_copy.cuh): the running thread issues a
// copy of 16 bytes (zeros where `src` is null) whose destination reads as NaN until the
// thread's wait_group completes its group; the bytes land then. A thread that ends with
// copies it never waited for stops the run.
void async_copy_16(void* dst, const void* src);
void async_copy_commit();
void async_copy_wait(int pending);
// A __shared__ variable's declaration, reached by a thread of the running block (the build
// adds the call after each): the block's first thread to get there fills it with NaN bytes.
void fresh_shared(void* variable, std::size_t bytes);
}  // namespace dtrain_emu

template <class T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of 8 bytes at most");
  std::uint64_t mine = 0;
  std::memcpy(&mine, &v, sizeof v);
  const int lane = static_cast<int>((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31);
  const int src = (lane & ~(width - 1)) | ((lane ^ lane_mask) & (width - 1));
  const std::uint64_t got = dtrain_emu::warp_exchange(mask, mine, src);
  T out;
  std::memcpy(&out, &got, sizeof out);
  return out;
}

template <class T> T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of 8 bytes at most");
  std::uint64_t mine = 0;
  std::memcpy(&mine, &v, sizeof v);
  const int lane = static_cast<int>((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31);
  const int src = (lane & ~(width - 1)) | (src_lane & (width - 1));
  const std::uint64_t got = dtrain_emu::warp_exchange(mask, mine, src);
  T out;
  std::memcpy(&out, &got, sizeof out);
  return out;
}

// A warp barrier: every lane in `mask` arrives before any goes on (a fiber switch, so a lane
// that reads what another wrote without it sees stale values here too).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  const int lane = static_cast<int>((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31);
  dtrain_emu::warp_exchange(mask, 0, lane);
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }

// CUDA's global min/max overloads for mixed integer and floating arguments.
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b) {
  using R = std::common_type_t<A, B>;
  return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b);
}
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b) {
  using R = std::common_type_t<A, B>;
  return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(b) : static_cast<R>(a);
}

// ---- kernel launches ---------------------------------------------------------------------
// `kernel<<<grid, block, shared, stream>>>(args)` is rewritten at build time (see
// tests/cuda_emu/CMakeLists.txt) into `dtrain_emu::launch(kernel, grid, block, shared,
// stream)(args)`. The arguments are converted and copied at the launch, as CUDA does; the
// grid runs when the stream is next synchronised.
namespace dtrain_emu {

using Task = std::function<void()>;

// Runs `task` in stream order: queued until the host next waits for the stream.
void enqueue(cudaStream_t stream, Task task);
// Checks that [p, p + bytes) lies inside one device allocation (false: an error is printed).
bool device_range_ok(const void* p, std::size_t bytes, const char* what);
// Records what the next cudaGetLastError returns.
void set_last_error(cudaError_t err);

// Checks a launch as a GPU would; false records cudaErrorInvalidConfiguration.
bool launch_config_ok(dim3 grid, dim3 block, std::size_t shared_bytes);
// A kernel's pointer argument must point into device or pinned memory (or one past the end
// of an allocation); anything else would fault on a GPU, so the emulator stops there.
void check_kernel_pointer(const void* p, std::size_t argument);

template <class T> void check_kernel_argument(const T&, std::size_t) {}
template <class T> void check_kernel_argument(T* p, std::size_t argument) {
  if (p) check_kernel_pointer(p, argument);
}
// `kernel` identifies the kernel (the emulator remembers whether it synchronises).
void enqueue_grid(cudaStream_t stream, dim3 grid, dim3 block, const void* kernel, Task body);

template <class... P> struct Launcher {
  void (*kernel)(P...);
  dim3 grid, block;
  std::size_t shared_bytes;
  cudaStream_t stream;

  template <class... A> void operator()(A&&... args) const {
    if (!launch_config_ok(grid, block, shared_bytes)) return;
    auto k = kernel;
    std::tuple<std::decay_t<P>...> copied(std::forward<A>(args)...);
    std::apply([](const auto&... a) {
      std::size_t i = 0;
      (check_kernel_argument(a, i++), ...);
    }, copied);
    enqueue_grid(stream, grid, block, reinterpret_cast<const void*>(k),
                 [k, copied] { std::apply(k, copied); });
  }
};

template <class... P>
Launcher<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared_bytes = 0,
                      cudaStream_t stream = nullptr) {
  return Launcher<P...>{kernel, grid, block, shared_bytes, stream};
}

}  // namespace dtrain_emu
