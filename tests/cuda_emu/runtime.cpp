// The emulated CUDA runtime: devices, memory, streams, events, copies (see cuda_runtime.h here).
//
// Device memory is mapped inaccessible and opened only while queued device work runs, so a
// host access to device memory faults as it would on a GPU. Each allocation ends on a guard
// page (an overrun faults) and starts NaN-filled (a read before any write shows). Work on a
// stream is queued and runs when the host synchronises with it (cudaStreamSynchronize, an
// event, a copy into pageable memory, cudaFree ...), so a result read from pinned memory
// without a synchronisation is stale, as it can be on a GPU.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda.h"
#include "cuda_runtime.h"

struct CUstream_st {
  std::deque<dtrain_emu::Task> queue;
  unsigned long long queued = 0, completed = 0;
};

struct CUevent_st {
  CUstream_st* stream = nullptr;
  unsigned long long mark = 0;  // complete once stream->completed reaches it
};

namespace dtrain_emu {
namespace {

constexpr std::size_t kAlignment = 256;  // cudaMalloc's
constexpr std::size_t kDeviceBytes = 16ull << 30;

struct Allocation {
  char* map;              // start of the mapping
  std::size_t open_len;   // the accessible part; one guard page follows (not for chunks)
  std::size_t bytes;      // what was asked for
  bool chunk = false;     // a physical chunk mapped into a reservation (cuMemMap)
  bool accessible = true;  // chunks: once cuMemSetAccess granted it
};

struct Reservation {  // cuMemAddressReserve
  char* map;
  std::size_t map_len;
  std::size_t bytes;
};

std::recursive_mutex g_mutex;
std::map<const char*, Allocation> g_device;  // by user pointer
std::map<const char*, std::size_t> g_pinned;
std::map<const char*, Reservation> g_reserved;          // by aligned start
std::map<CUmemGenericAllocationHandle, std::size_t> g_handles;  // physical chunks: bytes
std::size_t g_handles_created = 0;
std::size_t g_handle_bytes = 0, g_handle_bytes_peak = 0;  // of g_handles: now, highest
std::set<CUstream_st*> g_streams;
CUstream_st g_legacy_stream;  // stream 0
std::size_t g_device_bytes = 0;
bool g_open = false;
thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

cudaError_t fail(cudaError_t err) {
  t_last_error = err;
  return err;
}

int device_count() {
  const char* v = std::getenv("DTRAIN_CUDA_EMU_DEVICES");
  return v && *v ? std::atoi(v) : 1;
}

// The compute capability reported, major * 10 + minor (DTRAIN_CUDA_EMU_SM, 90 by default):
// an older one shows how the plugin refuses GPUs its kernels are not built for.
int compute_capability() {
  const char* v = std::getenv("DTRAIN_CUDA_EMU_SM");
  return v && *v ? std::atoi(v) : 90;
}

// The L2 size reported (DTRAIN_CUDA_EMU_L2_BYTES, 96 KiB by default): small, so that test
// shapes are cut into several groups where the plugin sizes work to the cache.
int l2_bytes() {
  const char* v = std::getenv("DTRAIN_CUDA_EMU_L2_BYTES");
  return v && *v ? std::atoi(v) : 96 * 1024;
}

void protect(const Allocation& a, bool open) {
  const bool rw = open && a.accessible;
  if (mprotect(a.map, a.open_len, rw ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::perror("CUDA emulator: mprotect");
    std::abort();
  }
}

// Device memory is readable and writable only while device work runs.
struct DeviceAccess {
  DeviceAccess() : was_open(g_open) {
    if (!g_open)
      for (auto& entry : g_device) protect(entry.second, true);
    g_open = true;
  }
  ~DeviceAccess() {
    if (was_open) return;
    for (auto& entry : g_device) protect(entry.second, false);
    g_open = false;
  }
  bool was_open;
};

// The allocation holding [p, p + bytes), or nullptr.
const Allocation* find_device(const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = g_device.upper_bound(c);
  if (it == g_device.begin()) return nullptr;
  --it;
  if (c < it->first || c + bytes > it->first + it->second.bytes) return nullptr;
  return &it->second;
}

// The reservation holding [p, p + bytes), or nullptr.
const Reservation* find_reserved(const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = g_reserved.upper_bound(c);
  if (it == g_reserved.begin()) return nullptr;
  --it;
  return c + bytes <= it->first + it->second.bytes ? &it->second : nullptr;
}

// Whether [p, p + bytes) is device memory a GPU may touch: inside one cudaMalloc block, or
// inside a reservation with every chunk it touches mapped and accessible.
bool device_range(const void* p, std::size_t bytes) {
  const Allocation* a = find_device(p, bytes);
  if (a && !a->chunk) return true;
  if (!find_reserved(p, bytes)) return false;
  const char* c = static_cast<const char*>(p);
  const char* end = c + bytes;
  while (c < end) {
    const Allocation* chunk = find_device(c, 1);
    if (!chunk || !chunk->chunk || !chunk->accessible) return false;
    c = chunk->map + chunk->bytes;
  }
  return true;
}

bool in_device(const void* p) { return device_range(p, 1); }

bool in_pinned(const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = g_pinned.upper_bound(c);
  if (it == g_pinned.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

CUstream_st* stream_of(cudaStream_t s) { return s ? s : &g_legacy_stream; }

// DTRAIN_CUDA_EMU_OTHER_STREAMS_FIRST=1: before a stream's work runs, every other stream's
// queued work runs. Streams without a dependency may run in either order on a GPU; this
// order runs work queued later on one stream (the compute stream, say) before work queued
// earlier on another (a collective), so a buffer overwritten before the collective read it
// shows up as a wrong result.
bool other_streams_first() {
  static const bool on = [] {
    const char* v = std::getenv("DTRAIN_CUDA_EMU_OTHER_STREAMS_FIRST");
    const bool set = v && std::strcmp(v, "1") == 0;
    if (set) std::fprintf(stderr, "cuda emulator: other streams' queued work runs first\n");  // tests check it
    return set;
  }();
  return on;
}

// Runs the stream's queued work up to its `mark`-th task (all of it by default).
void flush(CUstream_st* s, unsigned long long mark = ~0ull) {
  if (s->queue.empty() || s->completed >= mark) return;
  static bool cascading = false;
  if (other_streams_first() && !cascading) {
    cascading = true;
    if (s != &g_legacy_stream) flush(&g_legacy_stream);
    for (CUstream_st* other : g_streams)
      if (other != s) flush(other);
    cascading = false;
  }
  DeviceAccess open;
  while (!s->queue.empty() && s->completed < mark) {
    Task task = std::move(s->queue.front());
    s->queue.pop_front();
    task();
    ++s->completed;
  }
}

void flush_all() {
  flush(&g_legacy_stream);
  for (CUstream_st* s : g_streams) flush(s);
}

}  // namespace

void set_last_error(cudaError_t err) { t_last_error = err; }

void enqueue(cudaStream_t stream, Task task) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  CUstream_st* s = stream_of(stream);
  s->queue.push_back(std::move(task));
  ++s->queued;
}

bool device_range_ok(const void* p, std::size_t bytes, const char* what) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (device_range(p, bytes ? bytes : 1)) return true;
  std::fprintf(stderr, "CUDA emulator: %s: %zu bytes at %p are not inside one device allocation\n",
               what, bytes, p);
  return false;
}

void check_kernel_pointer(const void* p, std::size_t argument) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // Any address of a reservation is a device address, mapped or not (a kernel may be handed
  // an arena's start and touch only its mapped pieces; touching the rest faults).
  if (device_range(p, 1) || find_reserved(p, 1) || in_pinned(p, 1)) return;
  const char* c = static_cast<const char*>(p);
  auto it = g_device.lower_bound(c);
  if (it != g_device.begin() && std::prev(it)->first + std::prev(it)->second.bytes == c) return;
  std::fprintf(stderr,
               "CUDA emulator: kernel argument %zu (%p) is neither device nor pinned memory: a "
               "GPU would fault on it\n",
               argument, p);
  std::abort();
}

}  // namespace dtrain_emu

using namespace dtrain_emu;

// ---- devices and errors ------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  const int n = device_count();
  *count = n > 0 ? n : 0;
  if (n < 0) return fail(cudaErrorInsufficientDriver);  // emulates a node without a driver
  if (n == 0) return fail(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "CUDA emulator on the CPU");
  // Every process sees the same UUID for a given ordinal: ranks of a node share the "GPU".
  std::snprintf(prop->uuid.bytes, sizeof prop->uuid.bytes, "dtrain-emu-%d", device);
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = compute_capability() / 10;
  prop->minor = compute_capability() % 10;
  prop->multiProcessorCount = 1;
  prop->l2CacheSize = l2_bytes();
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  flush_all();
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return t_last_error; }

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unrecognized error code";
}

// ---- memory ------------------------------------------------------------------------------

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes - g_device_bytes;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  const std::size_t page = page_size();
  const std::size_t aligned = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  const std::size_t open_len = (aligned + page - 1) / page * page;
  if (aligned < bytes || g_device_bytes + open_len > kDeviceBytes) return fail(cudaErrorMemoryAllocation);
  void* map = mmap(nullptr, open_len + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (map == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  Allocation a{static_cast<char*>(map), open_len, bytes};
  char* user = a.map + open_len - aligned;  // ends on the guard page
  protect(a, true);
  std::memset(a.map, 0xff, open_len);  // NaN in every float: a read before a write shows
  if (!g_open) protect(a, false);
  g_device.emplace(user, a);
  g_device_bytes += open_len;
  *ptr = user;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!ptr) return cudaSuccess;
  auto it = g_device.find(static_cast<const char*>(ptr));
  if (it == g_device.end() || it->second.chunk) return fail(cudaErrorInvalidDevicePointer);
  flush_all();  // cudaFree synchronises the device
  munmap(it->second.map, it->second.open_len + page_size());
  g_device_bytes -= it->second.open_len;
  g_device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *ptr = std::malloc(bytes ? bytes : 1);
  if (!*ptr) return fail(cudaErrorMemoryAllocation);
  g_pinned.emplace(static_cast<const char*>(*ptr), bytes ? bytes : 1);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!ptr) return cudaSuccess;
  auto it = g_pinned.find(static_cast<const char*>(ptr));
  if (it == g_pinned.end()) return fail(cudaErrorInvalidValue);
  flush_all();
  g_pinned.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *attr = cudaPointerAttributes{};
  attr->device = -2;
  if (ptr && in_device(ptr)) {
    attr->type = cudaMemoryTypeDevice;
    attr->device = t_device;
    attr->devicePointer = const_cast<void*>(ptr);
  } else if (ptr && in_pinned(ptr, 1)) {
    attr->type = cudaMemoryTypeHost;
    attr->device = t_device;
    attr->hostPointer = const_cast<void*>(ptr);
  } else {
    attr->type = cudaMemoryTypeUnregistered;
    attr->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (bytes == 0) return cudaSuccess;
  const bool dst_dev = in_device(dst), src_dev = in_device(src);
  // A device pointer must hold the whole range; a host range must not touch device memory.
  if ((dst_dev && !device_range(dst, bytes)) || (src_dev && !device_range(src, bytes))) {
    std::fprintf(stderr, "CUDA emulator: cudaMemcpyAsync of %zu bytes runs past a device allocation\n",
                 bytes);
    return fail(cudaErrorInvalidValue);
  }
  const bool direction_ok = kind == cudaMemcpyDefault ||
                            (kind == cudaMemcpyHostToDevice && dst_dev && !src_dev) ||
                            (kind == cudaMemcpyDeviceToHost && !dst_dev && src_dev) ||
                            (kind == cudaMemcpyDeviceToDevice && dst_dev && src_dev) ||
                            (kind == cudaMemcpyHostToHost && !dst_dev && !src_dev);
  if (!direction_ok) {
    std::fprintf(stderr, "CUDA emulator: cudaMemcpyAsync kind %d does not match the pointers\n",
                 static_cast<int>(kind));
    return fail(cudaErrorInvalidMemcpyDirection);
  }
  CUstream_st* s = stream_of(stream);
  if (!dst_dev && !in_pinned(dst, bytes)) {
    // Into pageable memory the copy is synchronous: it waits for the stream's earlier work.
    flush(s);
    DeviceAccess open;
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
  }
  if (!src_dev && !in_pinned(src, bytes)) {
    // From pageable memory the source is taken at the call; the caller may reuse it at once.
    auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes);
    enqueue(s, [dst, copy] { std::memcpy(dst, copy->data(), copy->size()); });
    return cudaSuccess;
  }
  enqueue(s, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  flush_all();
  return e;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (bytes == 0) return cudaSuccess;
  if (!device_range(ptr, bytes)) {
    std::fprintf(stderr, "CUDA emulator: cudaMemsetAsync of %zu bytes outside device memory\n", bytes);
    return fail(cudaErrorInvalidValue);
  }
  enqueue(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

// ---- streams and events ------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *stream = new CUstream_st;
  g_streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!g_streams.count(stream)) return fail(cudaErrorInvalidResourceHandle);
  flush(stream);  // queued work still completes
  g_streams.erase(stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (stream && !g_streams.count(stream)) return fail(cudaErrorInvalidResourceHandle);
  flush(stream_of(stream));
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  event->stream = stream_of(stream);
  event->mark = event->stream->queued;
  return cudaSuccess;
}

// The emulated device works only when asked: a query of a pending event answers "not ready"
// and runs the work up to the event, so the next query finds it complete. Callers thus see
// both answers, as on a GPU.
cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!event->stream || event->stream->completed >= event->mark) return cudaSuccess;
  flush(event->stream, event->mark);
  return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (event->stream) flush(event->stream, event->mark);
  return cudaSuccess;
}

// The emulator keeps no clock: the "time" between two events is the number of operations
// queued between them, a microsecond each, so that profiles are exact and reproducible.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!start->stream || !end->stream) return fail(cudaErrorInvalidResourceHandle);
  if (end->stream->completed < end->mark) return cudaErrorNotReady;
  *ms = 1e-3f * static_cast<float>(end->mark - start->mark);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // Work queued on `stream` after this call must see the event's work: run that now (on a
  // GPU the stream would wait; the order of the results is the same).
  if (event->stream && event->stream != stream_of(stream)) flush(event->stream, event->mark);
  return cudaSuccess;
}

// ---- virtual memory management (driver API, through the entry points) ----------------------
// A reservation is an inaccessible address range; a mapped chunk is a fresh NaN-filled
// mapping there, reachable by device work only after cuMemSetAccess; unmapping drops its pages
// at once, so work still queued that touches it faults, as on a GPU. Chunks are
// DTRAIN_CUDA_EMU_GRANULARITY bytes (64 KiB by default, 2 MiB on current GPUs), so small test
// models still have arenas of many chunks.
namespace {

std::size_t granularity() {
  static const std::size_t g = [] {
    const char* v = std::getenv("DTRAIN_CUDA_EMU_GRANULARITY");
    const std::size_t want = v && *v ? std::strtoull(v, nullptr, 10) : 65536;
    return std::max(page_size(), want / page_size() * page_size());
  }();
  return g;
}

CUresult vmm_granularity(std::size_t* g, const CUmemAllocationProp*,
                         CUmemAllocationGranularity_flags) {
  *g = granularity();
  return CUDA_SUCCESS;
}

CUresult vmm_reserve(CUdeviceptr* ptr, std::size_t bytes, std::size_t alignment, CUdeviceptr,
                     unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::size_t g = std::max(granularity(), alignment);
  if (bytes == 0 || bytes % granularity() != 0) return CUDA_ERROR_INVALID_VALUE;
  void* map = mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto at = (reinterpret_cast<std::uintptr_t>(map) + g - 1) / g * g;
  char* start = reinterpret_cast<char*>(at);
  g_reserved.emplace(start, Reservation{static_cast<char*>(map), bytes + g, bytes});
  *ptr = at;
  return CUDA_SUCCESS;
}

CUresult vmm_address_free(CUdeviceptr ptr, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  char* start = reinterpret_cast<char*>(ptr);
  auto it = g_reserved.find(start);
  if (it == g_reserved.end() || it->second.bytes != bytes) return CUDA_ERROR_INVALID_VALUE;
  auto chunk = g_device.lower_bound(start);
  if (chunk != g_device.end() && chunk->first < start + bytes) {
    std::fprintf(stderr, "CUDA emulator: cuMemAddressFree of a range with chunks still mapped\n");
    return CUDA_ERROR_INVALID_VALUE;
  }
  munmap(it->second.map, it->second.map_len);
  g_reserved.erase(it);
  return CUDA_SUCCESS;
}

CUresult vmm_create(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                    const CUmemAllocationProp*, unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (bytes == 0 || bytes % granularity() != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g_device_bytes + bytes > kDeviceBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  *handle = ++g_handles_created;
  g_handles.emplace(*handle, bytes);
  g_device_bytes += bytes;
  g_handle_bytes += bytes;
  g_handle_bytes_peak = std::max(g_handle_bytes_peak, g_handle_bytes);
  return CUDA_SUCCESS;
}

CUresult vmm_release(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto it = g_handles.find(handle);
  if (it == g_handles.end()) return CUDA_ERROR_INVALID_VALUE;
  g_device_bytes -= it->second;
  g_handle_bytes -= it->second;
  g_handles.erase(it);
  return CUDA_SUCCESS;
}

CUresult vmm_map(CUdeviceptr ptr, std::size_t bytes, std::size_t offset,
                 CUmemGenericAllocationHandle handle, unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  char* at = reinterpret_cast<char*>(ptr);
  auto h = g_handles.find(handle);
  if (h == g_handles.end() || h->second != bytes || offset != 0 || ptr % granularity() != 0 ||
      !find_reserved(at, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto next = g_device.lower_bound(at);
  const bool overlaps = (next != g_device.end() && next->first < at + bytes) ||
                        (next != g_device.begin() && std::prev(next)->second.chunk &&
                         std::prev(next)->first + std::prev(next)->second.bytes > at);
  if (overlaps) {
    std::fprintf(stderr, "CUDA emulator: cuMemMap onto an address that is already mapped\n");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
      MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::memset(at, 0xff, bytes);  // fresh physical memory holds anything: NaN shows a read
  Allocation a{at, bytes, bytes, /*chunk=*/true, /*accessible=*/false};
  protect(a, false);
  g_device.emplace(at, a);
  return CUDA_SUCCESS;
}

CUresult vmm_set_access(CUdeviceptr ptr, std::size_t bytes, const CUmemAccessDesc* desc,
                        std::size_t count) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  char* at = reinterpret_cast<char*>(ptr);
  if (count != 1 || !find_reserved(at, bytes)) return CUDA_ERROR_INVALID_VALUE;
  for (auto it = g_device.lower_bound(at); it != g_device.end() && it->first < at + bytes; ++it) {
    it->second.accessible = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    protect(it->second, g_open);
  }
  return CUDA_SUCCESS;
}

CUresult vmm_unmap(CUdeviceptr ptr, std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  char* at = reinterpret_cast<char*>(ptr);
  auto it = g_device.find(at);
  // As the driver: exactly one earlier mapping (this device maps a chunk at a time).
  if (it == g_device.end() || !it->second.chunk || it->second.bytes != bytes)
    return CUDA_ERROR_INVALID_VALUE;
  // The pages go at once: queued work that still touches them faults when it runs.
  mmap(at, bytes, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  g_device.erase(it);
  return CUDA_SUCCESS;
}

CUresult vmm_device_get(CUdevice* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_VALUE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

// DTRAIN_CUDA_EMU_VMM=0 emulates a driver without virtual memory management.
CUresult vmm_device_attribute(int* value, CUdevice_attribute attr, CUdevice) {
  const char* v = std::getenv("DTRAIN_CUDA_EMU_VMM");
  *value = attr == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED && !(v && *v == '0');
  return CUDA_SUCCESS;
}

}  // namespace

// Probes for the tests, found with dlsym in the loaded plugin (absent from a real one):
// bytes of the physical chunks that exist now (cuMemCreate'd, not released), the most there
// were since the last call of the peak probe (which starts the next period), and how many
// chunks were ever made.
extern "C" __attribute__((visibility("default"))) std::size_t dtrain_cuda_emu_chunk_bytes() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_handle_bytes;
}
extern "C" __attribute__((visibility("default"))) std::size_t dtrain_cuda_emu_chunk_bytes_peak() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::size_t peak = g_handle_bytes_peak;
  g_handle_bytes_peak = g_handle_bytes;
  return peak;
}
extern "C" __attribute__((visibility("default"))) std::size_t dtrain_cuda_emu_chunks_created() {
  return g_handles_created;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  static const std::map<std::string, void*> table = {
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&vmm_granularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&vmm_reserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&vmm_address_free)},
      {"cuMemCreate", reinterpret_cast<void*>(&vmm_create)},
      {"cuMemRelease", reinterpret_cast<void*>(&vmm_release)},
      {"cuMemMap", reinterpret_cast<void*>(&vmm_map)},
      {"cuMemUnmap", reinterpret_cast<void*>(&vmm_unmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&vmm_set_access)},
      {"cuDeviceGet", reinterpret_cast<void*>(&vmm_device_get)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&vmm_device_attribute)},
  };
  auto it = table.find(symbol);
  *fn = it == table.end() ? nullptr : it->second;
  if (status) *status = it == table.end() ? cudaDriverEntryPointSymbolNotFound : cudaDriverEntryPointSuccess;
  return cudaSuccess;
}
