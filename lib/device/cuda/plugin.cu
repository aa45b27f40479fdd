// Entry points of the CUDA plugin (contract in lib/device/plugin.hpp). This build probes for
// GPUs; the CUDA implementation of the Device interface (cuBLAS, kernels) is not part of it
// yet, so dtrain_cuda_get_device returns null and `--device cuda` reports that clearly.
#include <cuda_runtime.h>

#include <cstdio>

#include "device/plugin.hpp"

#define DTRAIN_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

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
  return count;
}

DTRAIN_PLUGIN_EXPORT dtrain::Device* dtrain_cuda_get_device(int) { return nullptr; }
