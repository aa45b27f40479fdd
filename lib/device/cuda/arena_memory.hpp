#pragma once
// ArenaMemory: the parameter and gradient arenas of a CudaDevice in CUDA virtual memory, so
// that ZeRO 2/3 can hand back the pieces a rank does not own (Device::discard) and take them
// again before use (Device::restore). An arena is one reserved address range backed by
// physical chunks of the driver's allocation granularity (2 MiB on current GPUs), each
// mapped on its own so that it can be unmapped on its own.
//
// Unmapping waits for the stream: work queued before discard() may still use a chunk, so the
// chunk stays mapped (pending) until an event recorded at discard() has passed; restore()
// takes a pending chunk back as it is. Unmapped physical chunks wait in a spare pool for the
// next restore(); trim() gives the driver back those no restore() needed since the last trim()
// (the Trainer trims once per step), so the pool settles at what a step takes and steps after
// the first allocate nothing; trim(all) empties the pool (after set-up).
// Freeing an arena gives its chunks and the pool back at once.
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
  // Releases the spare chunks that no restore() took since the last trim(), or all of them.
  void trim(bool all) noexcept;

 private:
  enum class State { mapped, pending, unmapped };
  struct Chunk {
    CUmemGenericAllocationHandle handle = 0;
    State state = State::unmapped;
    unsigned discards = 0;  // which discard a pending entry belongs to
  };
  struct Arena {
    CUdeviceptr base = 0;
    std::size_t bytes = 0;  // asked for; the last chunk may be partly beyond it
    std::vector<Chunk> chunks;
  };
  struct Pending {  // a discarded chunk still mapped until `event` has passed
    Arena* arena;
    std::size_t chunk;
    unsigned discard;  // stale once the chunk was restored (and maybe discarded again)
    cudaEvent_t event;
  };

  Arena* find(const void* ptr, std::size_t bytes);
  void map(Arena& a, std::size_t chunk);  // without access yet
  void grant_access(Arena& a, std::size_t first, std::size_t count);
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
  std::mutex mutex_;
  std::map<CUdeviceptr, Arena> arenas_;              // by base address
  std::vector<Pending> pending_;                      // in event order
  std::vector<CUmemGenericAllocationHandle> spare_;  // unmapped physical chunks
  std::size_t spare_low_ = 0;  // the fewest spares since the last trim(): none of them used
  std::vector<cudaEvent_t> free_events_;
  std::size_t total_chunks_ = 0;  // of all arenas: what the vectors above are reserved for
};

}  // namespace dtrain::cuda
