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

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

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
  std::size_t open_len;   // the accessible part; one guard page follows
  std::size_t bytes;      // what was asked for
};

std::recursive_mutex g_mutex;
std::map<const char*, Allocation> g_device;  // by user pointer
std::map<const char*, std::size_t> g_pinned;
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

void protect(const Allocation& a, bool open) {
  if (mprotect(a.map, a.open_len, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
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

bool in_device(const void* p) { return find_device(p, 1) != nullptr; }

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
    return v && std::strcmp(v, "1") == 0;
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
  if (find_device(p, bytes ? bytes : 1)) return true;
  std::fprintf(stderr, "CUDA emulator: %s: %zu bytes at %p are not inside one device allocation\n",
               what, bytes, p);
  return false;
}

void check_kernel_pointer(const void* p, std::size_t argument) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (find_device(p, 1) || in_pinned(p, 1)) return;
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
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
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
  if (it == g_device.end()) return fail(cudaErrorInvalidDevicePointer);
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
  if ((dst_dev && !find_device(dst, bytes)) || (src_dev && !find_device(src, bytes))) {
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
  if (!find_device(ptr, bytes)) {
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

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  // Work queued on `stream` after this call must see the event's work: run that now (on a
  // GPU the stream would wait; the order of the results is the same).
  if (event->stream && event->stream != stream_of(stream)) flush(event->stream, event->mark);
  return cudaSuccess;
}
