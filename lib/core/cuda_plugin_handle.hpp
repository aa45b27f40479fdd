#pragma once
// The CUDA plugin (libdtrain_cuda.so), opened once per process for every part of the core
// that needs it (the CUDA device, the device-buffer communicators). DTRAIN_CUDA_PLUGIN names
// it explicitly; otherwise it is looked for beside libdtrain.so, then on the loader path,
// and only where NVIDIA's driver library (libcuda.so.1) can be loaded. The handle stays open
// for the life of the process.
#include <string>

namespace dtrain {

inline constexpr const char* kCudaPluginName = "libdtrain_cuda.so";
inline constexpr const char* kCudaDriverName = "libcuda.so.1";

struct CudaPluginHandle {
  void* handle = nullptr;  // dlopen handle, null when the plugin could not be loaded
  std::string error;       // why not, naming the plugin
  void* symbol(const char* name) const;  // dlsym, null when absent
};

const CudaPluginHandle& cuda_plugin_handle();

}  // namespace dtrain
