#pragma once
// CachingAllocator: device memory is taken from the driver once and then recycled. cudaMalloc
// and cudaFree synchronise the whole device and cost up to milliseconds, so a freed block goes
// back to a cache and a later request of about the same size takes it again; after the first
// training step no request reaches the driver. Plain C++ over a RawMemory interface, so the
// caching rules are tested on machines without a GPU (tests/gpu/test_cuda_host_logic.cpp).
//
// Freeing is stream-ordered: the device runs all its work on one stream, so a block freed
// while kernels still use it is only handed out again to work queued behind them.
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

namespace dtrain::cuda {

class RawMemory {
 public:
  virtual ~RawMemory() = default;
  // Null when out of memory; any other failure (a fault an earlier kernel left) throws, so
  // that it is not reported as out of memory.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;
  virtual void wait_idle() = 0;  // returns when no queued work uses any block; throws on a fault
};

struct AllocatorStats {
  std::size_t raw_allocations = 0;  // successful RawMemory::allocate calls
  std::size_t bytes_in_use = 0;     // blocks handed out (rounded sizes)
  std::size_t bytes_cached = 0;     // freed blocks kept for reuse
  std::size_t peak_bytes_in_use = 0;
};

class CachingAllocator {
 public:
  // Sizes are rounded up to this (cudaMalloc itself aligns to 256 bytes).
  static constexpr std::size_t kGranularity = 512;

  explicit CachingAllocator(RawMemory& raw) : raw_(raw) {}
  ~CachingAllocator();  // gives the cache back; blocks still in use are left to the driver
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 counts as 1), reused from the cache when one fits without
  // wasting more than a quarter of it. When the driver is out of memory the cache is emptied
  // and the request retried once; then Error(Errc::out_of_memory) is thrown.
  void* allocate(std::size_t bytes);
  // Returns a block from allocate() to the cache; null is ignored, an unknown pointer too
  // (it is not ours to free).
  void free(void* ptr) noexcept;
  // Gives every cached block back to the driver.
  void release_cached() noexcept;
  AllocatorStats stats() const;
  static std::size_t round_up(std::size_t bytes) noexcept;

 private:
  void release_cached_locked() noexcept;

  RawMemory& raw_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> cached_;     // rounded size -> free block
  std::unordered_map<void*, std::size_t> live_;  // block -> rounded size
  AllocatorStats stats_;
};

}  // namespace dtrain::cuda
