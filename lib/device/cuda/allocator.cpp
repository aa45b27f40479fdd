// Caching rules of the device allocator (see allocator.hpp).
#include "device/cuda/allocator.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain::cuda {

CachingAllocator::~CachingAllocator() { release_cached(); }

std::size_t CachingAllocator::round_up(std::size_t bytes) noexcept {
  if (bytes == 0) bytes = 1;
  return (bytes + kGranularity - 1) / kGranularity * kGranularity;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t size = round_up(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  // Best fit among cached blocks no more than a quarter larger than the request, so one
  // small tensor never pins down a huge block.
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first <= size + size / 4) {
    const std::size_t got = it->first;
    void* p = it->second;
    cached_.erase(it);
    stats_.bytes_cached -= got;
    live_.emplace(p, got);
    stats_.bytes_in_use += got;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return p;
  }
  void* p = raw_.allocate(size);
  if (!p && !cached_.empty()) {  // the cache may hold what the driver lacks
    raw_.wait_idle();
    release_cached_locked();
    p = raw_.allocate(size);
  }
  DTRAIN_CHECK(p != nullptr, Errc::out_of_memory,
               "CUDA device out of memory allocating " << size << " bytes ("
                                                       << stats_.bytes_in_use
                                                       << " bytes in use by dtrain)");
  ++stats_.raw_allocations;
  live_.emplace(p, size);
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return p;
}

void CachingAllocator::free(void* ptr) noexcept {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  const std::size_t size = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= size;
  try {
    cached_.emplace(size, ptr);
    stats_.bytes_cached += size;
  } catch (...) {  // no memory for the cache entry: give the block back instead
    raw_.release(ptr);
  }
}

void CachingAllocator::release_cached() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cached_.empty()) {
    try {
      raw_.wait_idle();
    } catch (...) {  // a faulted device: its blocks go back all the same
    }
  }
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() noexcept {
  for (const auto& entry : cached_) raw_.release(entry.second);
  cached_.clear();
  stats_.bytes_cached = 0;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace dtrain::cuda
