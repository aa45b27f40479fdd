// Arenas in CUDA virtual memory (see arena_memory.hpp).
#include "device/cuda/arena_memory.hpp"

#include <algorithm>
#include <string>

#include "device/cuda/cuda_check.hpp"
#include "dtrain/core/env.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain::cuda {
namespace {

template <class Fn> bool entry_point(const char* name, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status);
#else
  const cudaError_t err = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &status);
#endif
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || !p) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

void check_driver(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const Errc code = r == CUDA_ERROR_OUT_OF_MEMORY ? Errc::out_of_memory : Errc::internal;
  throw Error(code, std::string("CUDA driver error in ") + what + " (error " +
                        std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace

bool VmmDriver::load() noexcept {
  return entry_point("cuMemGetAllocationGranularity", mem_get_granularity) &&
         entry_point("cuMemAddressReserve", address_reserve) &&
         entry_point("cuMemAddressFree", address_free) && entry_point("cuMemCreate", create) &&
         entry_point("cuMemRelease", release) && entry_point("cuMemMap", map) &&
         entry_point("cuMemUnmap", unmap) && entry_point("cuMemSetAccess", set_access) &&
         entry_point("cuDeviceGet", device_get) &&
         entry_point("cuDeviceGetAttribute", device_get_attribute);
}

ArenaMemory::ArenaMemory(int ordinal, cudaStream_t stream) : ordinal_(ordinal), stream_(stream) {
  if (!env::get_bool(env::cuda::kVmm, true) || !drv_.load()) return;
  CUdevice dev = 0;
  int vmm = 0;
  if (drv_.device_get(&dev, ordinal) != CUDA_SUCCESS ||
      drv_.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                dev) != CUDA_SUCCESS || !vmm) {
    return;
  }
  prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop_.location.id = dev;
  access_.location = prop_.location;
  access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (drv_.mem_get_granularity(&chunk_, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      chunk_ == 0) {
    return;
  }
  supported_ = true;
}

// Like the devices, never run before exit in practice; gives everything back when it is.
ArenaMemory::~ArenaMemory() {
  if (!supported_) return;
  (void)cudaStreamSynchronize(stream_);
  reclaim_locked();
  for (auto& entry : arenas_) release_arena(entry.second);
  for (CUmemGenericAllocationHandle h : spare_) (void)drv_.release(h);
  for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
}

void* ArenaMemory::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t n = std::max<std::size_t>(1, (bytes + chunk_ - 1) / chunk_);
  CUdeviceptr base = 0;
  check_driver(drv_.address_reserve(&base, n * chunk_, chunk_, 0, 0), "cuMemAddressReserve");
  try {
    Arena& a = arenas_[base];
    a.base = base;
    a.bytes = bytes;
    a.chunks.resize(n);
    // Room for every chunk in the pool and the pending list: discard() never allocates.
    pending_.reserve(total_chunks_ + n);
    spare_.reserve(total_chunks_ + n);
  } catch (...) {
    arenas_.erase(base);
    (void)drv_.address_free(base, n * chunk_);
    throw;
  }
  total_chunks_ += n;
  return reinterpret_cast<void*>(base);
}

bool ArenaMemory::free(void* ptr) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = arenas_.find(reinterpret_cast<CUdeviceptr>(ptr));
  if (it == arenas_.end()) return false;
  (void)cudaStreamSynchronize(stream_);  // queued work may still use it; every event passes
  reclaim_locked();
  Arena& a = it->second;
  // Entries a failed synchronisation left behind must not outlive the arena.
  for (Pending& p : pending_)
    if (p.arena == &a) p.arena = nullptr;
  total_chunks_ -= a.chunks.size();
  release_arena(a);
  arenas_.erase(it);
  for (CUmemGenericAllocationHandle h : spare_) (void)drv_.release(h);
  spare_.clear();
  spare_low_ = 0;
  return true;
}

ArenaMemory::Arena* ArenaMemory::find(const void* ptr, std::size_t bytes) {
  const auto p = reinterpret_cast<CUdeviceptr>(ptr);
  auto it = arenas_.upper_bound(p);
  if (it == arenas_.begin()) return nullptr;
  Arena& a = std::prev(it)->second;
  return p + bytes <= a.base + a.chunks.size() * chunk_ ? &a : nullptr;
}

bool ArenaMemory::discard(void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Arena* a = find(ptr, bytes);
  if (!a) return false;
  reclaim_locked();
  const std::size_t offset = reinterpret_cast<CUdeviceptr>(ptr) - a->base;
  const std::size_t first = (offset + chunk_ - 1) / chunk_;  // whole chunks only; the tail
  const std::size_t last =                                    // past the arena's end counts
      offset + bytes >= a->bytes ? a->chunks.size() : (offset + bytes) / chunk_;
  cudaEvent_t event = nullptr;
  for (std::size_t c = first; c < last; ++c) {
    Chunk& chunk = a->chunks[c];
    if (chunk.state != State::mapped) continue;
    if (!event) {
      event = take_event();
      DTRAIN_CUDA(cudaEventRecord(event, stream_));
    }
    chunk.state = State::pending;
    pending_.push_back({a, c, ++chunk.discards, event});
  }
  return true;
}

bool ArenaMemory::restore(void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Arena* a = find(ptr, bytes);
  if (!a) return false;
  if (bytes == 0) return true;
  reclaim_locked();
  const std::size_t offset = reinterpret_cast<CUdeviceptr>(ptr) - a->base;
  const std::size_t last = (offset + bytes + chunk_ - 1) / chunk_;
  // Chunks mapped here in a row get their access in one call (it is the slow one).
  std::size_t run_first = 0, run = 0;
  auto grant = [&] {
    if (run) grant_access(*a, run_first, run);
    run = 0;
  };
  try {
    for (std::size_t c = offset / chunk_; c < last; ++c) {
      Chunk& chunk = a->chunks[c];
      if (chunk.state == State::unmapped) {
        if (run == 0) run_first = c;
        map(*a, c);
        ++run;
        continue;
      }
      grant();
      if (chunk.state == State::pending) chunk.state = State::mapped;  // its entry goes stale
    }
    grant();
  } catch (...) {
    try {
      grant();  // what was mapped before the failure stays usable
    } catch (...) {
    }
    throw;
  }
  DTRAIN_CUDA(cudaMemsetAsync(ptr, 0, bytes, stream_));
  return true;
}

CUmemGenericAllocationHandle ArenaMemory::take_chunk() {
  if (spare_.empty()) {
    CUmemGenericAllocationHandle h = 0;
    if (drv_.create(&h, chunk_, &prop_, 0) == CUDA_SUCCESS) return h;
    // Out of memory: chunks discarded but not yet unmapped may be all there is.
    DTRAIN_CUDA(cudaStreamSynchronize(stream_));
    reclaim_locked();
    if (spare_.empty()) {
      check_driver(drv_.create(&h, chunk_, &prop_, 0), "cuMemCreate");
      return h;
    }
  }
  const CUmemGenericAllocationHandle h = spare_.back();
  spare_.pop_back();
  spare_low_ = std::min(spare_low_, spare_.size());
  return h;
}

void ArenaMemory::trim(bool all) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  reclaim_locked();
  if (all) spare_low_ = spare_.size();
  for (; spare_low_ > 0 && !spare_.empty(); --spare_low_) {
    (void)drv_.release(spare_.back());
    spare_.pop_back();
  }
  spare_low_ = spare_.size();
}

void ArenaMemory::map(Arena& a, std::size_t c) {
  const CUmemGenericAllocationHandle h = take_chunk();
  const CUresult r = drv_.map(a.base + c * chunk_, chunk_, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    spare_.push_back(h);
    check_driver(r, "cuMemMap");
  }
  a.chunks[c].handle = h;
  a.chunks[c].state = State::mapped;
}

void ArenaMemory::grant_access(Arena& a, std::size_t first, std::size_t count) {
  const CUresult r = drv_.set_access(a.base + first * chunk_, count * chunk_, &access_, 1);
  if (r == CUDA_SUCCESS) return;
  for (std::size_t c = first; c < first + count; ++c) unmap(a, c);
  check_driver(r, "cuMemSetAccess");
}

void ArenaMemory::unmap(Arena& a, std::size_t c) noexcept {
  Chunk& chunk = a.chunks[c];
  (void)drv_.unmap(a.base + c * chunk_, chunk_);
  spare_.push_back(chunk.handle);
  chunk.handle = 0;
  chunk.state = State::unmapped;
}

void ArenaMemory::reclaim() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  reclaim_locked();
}

void ArenaMemory::reclaim_locked() noexcept {
  std::size_t done = 0;
  while (done < pending_.size()) {
    const cudaEvent_t event = pending_[done].event;
    if (cudaEventQuery(event) != cudaSuccess) {
      (void)cudaGetLastError();  // "not ready" is not an error
      break;
    }
    for (; done < pending_.size() && pending_[done].event == event; ++done) {
      const Pending& p = pending_[done];
      if (!p.arena) continue;
      const Chunk& chunk = p.arena->chunks[p.chunk];
      if (chunk.state == State::pending && chunk.discards == p.discard) unmap(*p.arena, p.chunk);
    }
    free_events_.push_back(event);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

void ArenaMemory::release_arena(Arena& a) noexcept {
  for (std::size_t c = 0; c < a.chunks.size(); ++c) {
    Chunk& chunk = a.chunks[c];
    if (chunk.state == State::unmapped) continue;
    (void)drv_.unmap(a.base + c * chunk_, chunk_);
    (void)drv_.release(chunk.handle);
    chunk = Chunk{};
  }
  (void)drv_.address_free(a.base, a.chunks.size() * chunk_);
}

cudaEvent_t ArenaMemory::take_event() {
  if (free_events_.empty()) {
    cudaEvent_t e = nullptr;
    DTRAIN_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  const cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

}  // namespace dtrain::cuda
