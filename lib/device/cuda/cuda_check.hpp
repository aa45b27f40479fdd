#pragma once
// CUDA and cuBLAS status codes turned into dtrain::Error, so a failed call names what was
// attempted instead of surfacing later as a wrong number.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "dtrain/core/error.hpp"

namespace dtrain::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* what);

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw_cuda_error(err, what);
}
inline void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, what);
}
// After a kernel launch: a bad launch configuration shows up here; faults inside the kernel
// show up at the next synchronising call.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace dtrain::cuda

#define DTRAIN_CUDA(expr) ::dtrain::cuda::check((expr), #expr)
