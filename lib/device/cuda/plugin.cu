// Entry points of the CUDA plugin (contract in lib/device/plugin.hpp). The core dlopens this
// library only when a device is asked for, probes it with dtrain_cuda_device_count (which
// never aborts, also without a driver) and takes its Device from dtrain_cuda_get_device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/device_choice.hpp"
#include "device/plugin.hpp"
#include "dtrain/core/log.hpp"

#define DTRAIN_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
// Which of the `count` visible GPUs can run the kernels: they are built for sm_80 and newer
// (bf16 mma.sync, cp.async), and an older GPU would fail at its first kernel. On a node with
// both, ranks spread over the new ones only (choose_device).
std::vector<bool> usable_devices(int count) {
  std::vector<bool> usable(static_cast<std::size_t>(count > 0 ? count : 0), false);
  cudaDeviceProp prop{};
  for (int d = 0; d < count; ++d)
    usable[static_cast<std::size_t>(d)] = cudaGetDeviceProperties(&prop, d) == cudaSuccess &&
                                          prop.major >= dtrain::cuda::kOldestComputeMajor;
  return usable;
}
}  // namespace

DTRAIN_PLUGIN_EXPORT int dtrain_cuda_plugin_abi(void) { return dtrain::kCudaPluginAbi; }

DTRAIN_PLUGIN_EXPORT int dtrain_cuda_device_count(char* msg, unsigned long msg_len) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // e.g. error 35 (cudaErrorInsufficientDriver) on a machine without a driver
    if (msg && msg_len) {
      std::snprintf(msg, msg_len, "cudaGetDeviceCount failed: %s (error %d)",
                    cudaGetErrorString(err), static_cast<int>(err));
    }
    return 0;
  }
  if (count == 0 && msg && msg_len) std::snprintf(msg, msg_len, "no CUDA device present");
  const std::vector<bool> usable = usable_devices(count);
  const auto usable_count = static_cast<int>(std::count(usable.begin(), usable.end(), true));
  if (usable_count > 0) return usable_count;
  cudaDeviceProp prop{};
  if (count > 0 && msg && msg_len) {
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) prop = cudaDeviceProp{};
    std::snprintf(msg, msg_len,
                  "no CUDA device of compute capability %d.0 or newer (device 0: %s, sm_%d%d), "
                  "which the CUDA plugin's kernels are built for",
                  dtrain::cuda::kOldestComputeMajor, prop.name, prop.major, prop.minor);
  }
  return 0;
}

// One CudaDevice per GPU ordinal, created on first request. `ordinal` is relative to this
// process's slot on the node (device_choice.hpp): the core's 0 is the node-local rank's GPU.
// Devices are never destroyed: they live until exit, and the driver reclaims their memory.
DTRAIN_PLUGIN_EXPORT dtrain::Device* dtrain_cuda_get_device(int ordinal) {
  static std::mutex mutex;
  static std::map<int, dtrain::cuda::CudaDevice*> devices;
  try {
    int visible = 0;
    if (cudaGetDeviceCount(&visible) != cudaSuccess) return nullptr;
    const int chosen = dtrain::cuda::choose_device(ordinal, usable_devices(visible));
    std::lock_guard<std::mutex> lock(mutex);
    dtrain::cuda::CudaDevice*& dev = devices[chosen];
    if (!dev) {
      dev = new dtrain::cuda::CudaDevice(chosen);
      DTRAIN_LOG(debug, "CUDA device: " << dev->name());
    }
    return dev;
  } catch (const std::exception& e) {
    // No exception crosses the C entry point: the core reports "no device".
    DTRAIN_LOG(error, "CUDA plugin: " << e.what());
    return nullptr;
  }
}
