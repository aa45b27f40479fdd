// The plugin's entry point for communicators over device buffers (contract in
// comm/nccl_loader.hpp): the core passes a host (MPI) backend and gets back an NCCL or an
// MPI-staged transport for the process's GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>

#include "comm/nccl_loader.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/staged_backend.hpp"
#include "dtrain/core/log.hpp"
#ifdef DTRAIN_HAVE_NCCL
#include "comm/nccl_backend.hpp"
#endif

#define DTRAIN_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" dtrain::Device* dtrain_cuda_get_device(int ordinal);  // plugin.cu

DTRAIN_PLUGIN_EXPORT int dtrain_cuda_comm_abi(void) { return dtrain::comm::kCommPluginAbi; }

DTRAIN_PLUGIN_EXPORT int dtrain_cuda_pointer_on_device(const void* p) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err == cudaErrorInvalidValue) {
    (void)cudaGetLastError();  // memory CUDA does not know of: host memory, and no sticky error
    return 0;
  }
  if (err != cudaSuccess) {  // e.g. a fault an earlier kernel left: not a reason to call MPI
    DTRAIN_LOG(error, "CUDA plugin: cudaPointerGetAttributes failed: " << cudaGetErrorString(err)
                          << " (error " << static_cast<int>(err) << ")");
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? 1 : 0;
}

DTRAIN_PLUGIN_EXPORT int dtrain_cuda_comm_nccl_gpu(unsigned char* uuid) {
#ifdef DTRAIN_HAVE_NCCL
  try {
    auto* dev = static_cast<dtrain::cuda::CudaDevice*>(dtrain_cuda_get_device(0));
    cudaDeviceProp prop{};
    if (!dev || cudaGetDeviceProperties(&prop, dev->ordinal()) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    std::memcpy(uuid, prop.uuid.bytes, sizeof prop.uuid.bytes);
    return 1;
  } catch (...) {
    return 0;
  }
#else
  (void)uuid;
  return 0;
#endif
}

DTRAIN_PLUGIN_EXPORT dtrain::comm::DeviceBackend* dtrain_cuda_make_comm_backend(
    dtrain::comm::Backend* host, int transport, int* errc, char* msg, unsigned long msg_len) {
  using dtrain::Errc;
  auto refuse = [&](Errc code, const char* why) -> dtrain::comm::DeviceBackend* {
    if (errc) *errc = static_cast<int>(code);
    if (msg && msg_len) std::snprintf(msg, msg_len, "%s", why);
    return nullptr;
  };
  if (!host) return refuse(Errc::invalid_argument, "no host backend given");
  try {
    auto* dev = static_cast<dtrain::cuda::CudaDevice*>(dtrain_cuda_get_device(0));
    if (!dev) return refuse(Errc::unavailable, "no usable CUDA device in this process");
    switch (static_cast<dtrain::comm::DeviceTransport>(transport)) {
      case dtrain::comm::DeviceTransport::mpi_staged:
        return dtrain::cuda::make_staged_backend(*host, *dev).release();
      case dtrain::comm::DeviceTransport::nccl:
#ifdef DTRAIN_HAVE_NCCL
        dev->activate();
        return dtrain::comm::make_nccl_backend(*host, dev->stream(), dev->ordinal()).release();
#else
        return refuse(Errc::unavailable, "this CUDA plugin was built without NCCL");
#endif
    }
    return refuse(Errc::invalid_argument, "unknown device transport");
  } catch (const dtrain::Error& e) {
    return refuse(e.code(), e.what());
  } catch (const std::exception& e) {
    return refuse(Errc::internal, e.what());
  } catch (...) {
    return refuse(Errc::internal, "unknown exception while making a device transport");
  }
}
