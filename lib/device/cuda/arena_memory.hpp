#pragma once
// ArenaMemory: the parameter and gradient arenas of a CudaDevice in CUDA virtual memory, so
// that ZeRO 2/3 can hand back the pieces a rank does not own (Device::discard) and take them
// again before use (Device::restore). An arena is one reserved address range backed by
// physical chunks of the driver's allocation granularity (2 MiB on current GPUs), each
// mapped on its own so that it can be unmapped on its own.
//
// Unmapping waits for the stream: work queued before discard() may still use a chunk, so the
// chunk stays mapped (pending) until an event recorded at discard() has passed; restore()
// takes a pending chunk back as it is. Unmapped physical chunks stay in a spare pool and back
// the next restore(), so once training runs no step allocates from the driver and the pool
// never exceeds the most chunks held at once. Freeing an arena gives its chunks and the spare
// pool back to the driver.
//
// The driver functions come from cudaGetDriverEntryPoint: the plugin needs no link to libcuda.
// Without virtual memory management in the driver, or with DTRAIN_CUDA_VMM=0, supported() is
// false and the device falls back to ordinary allocations whose discard only zeroes.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace dtrain::cuda {

// The driver's virtual memory functions (their cuda.h signatures).
struct VmmDriver {
  CUresult (*mem_get_granularity)(std::size_t*, const CUmemAllocationProp*,
                                  CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                              unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, std::size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, std::size_t, const CUmemAccessDesc*, std::size_t) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;

  bool load() noexcept;  // false when the driver lacks any of them
};

struct ArenaStats {
  std::size_t chunk_bytes = 0;   // the granularity
  std::size_t mapped_bytes = 0;  // chunks backing arena addresses now (pending ones too)
  std::size_t spare_bytes = 0;   // unmapped chunks kept for the next restore()
};

class ArenaMemory {
 public:
  ArenaMemory(int ordinal, cudaStream_t stream);
  ~ArenaMemory();
  ArenaMemory(const ArenaMemory&) = delete;
  ArenaMemory& operator=(const ArenaMemory&) = delete;

  bool supported() const noexcept { return supported_; }
  // An arena of at least `bytes` with nothing mapped yet: restore() what is used (needs
  // supported()).
  void* allocate(std::size_t bytes);
  // false when ptr is not the start of an arena (the caller frees it otherwise).
  bool free(void* ptr) noexcept;
  // Each returns false when the range is not inside one arena (the caller falls back).
  // discard: the whole chunks inside the range are unmapped once queued work has passed.
  bool discard(void* ptr, std::size_t bytes);
  // restore: every chunk the range touches is mapped again, and the range zeroed (queued).
  bool restore(void* ptr, std::size_t bytes);
  // Unmaps the pending chunks whose queued work has passed (all of them after a stream
  // synchronisation); discard() and restore() do it too.
  void reclaim() noexcept;
  ArenaStats stats() const;

 private:
  enum class State { mapped, pending, unmapped };
  struct Chunk {
    CUmemGenericAllocationHandle handle = 0;
    State state = State::unmapped;
  };
  struct Arena {
    CUdeviceptr base = 0;
    std::vector<Chunk> chunks;
  };
  struct Pending {  // a discarded chunk still mapped until `event` has passed
    Arena* arena;   // null: restored meanwhile
    std::size_t chunk;
    cudaEvent_t event;
  };

  Arena* find(const void* ptr, std::size_t bytes);
  void map(Arena& a, std::size_t chunk);
  void unmap(Arena& a, std::size_t chunk) noexcept;
  CUmemGenericAllocationHandle take_chunk();
  void reclaim_locked() noexcept;
  void release_arena(Arena& a) noexcept;
  cudaEvent_t take_event();

  VmmDriver drv_;
  bool supported_ = false;
  int ordinal_;
  cudaStream_t stream_;
  std::size_t chunk_ = 0;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  mutable std::mutex mutex_;
  std::map<CUdeviceptr, Arena> arenas_;              // by base address
  std::vector<Pending> pending_;                      // in event order
  std::vector<CUmemGenericAllocationHandle> spare_;  // unmapped physical chunks
  std::vector<cudaEvent_t> free_events_;
  std::size_t total_chunks_ = 0;  // of all arenas: what the vectors above are reserved for
};

}  // namespace dtrain::cuda
